"""The captured step (issue 69, item 1) on the CPU: why a step is not captured, said in one
line; and the padded shapes' graphs, captured and replayed with new events copied into their
inputs, giving the steps and the trained weights of the plain step. There are no CUDA graphs on
the CPU: the graphs here are :class:`RerunGraph`, which records nothing and reruns the step's
Python on the captured item's buffers at every replay (as a CUDA graph reruns its kernels on
them); the capture itself is proven on a GPU (tools/validate_gpu.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch

from partgnn.distributed.communication_counter import CommunicationCounter
from partgnn.distributed.process_group import destroy_distributed, init_distributed
from partgnn.train.captured_step import CapturedStep, capture_refusal
from partgnn.train.config.config_file import load_config
from partgnn.train.step import forward_backward
from partgnn.train.trainer import Trainer
from tests.distributed.reference import relative_error
from tests.train.conftest import write_config

CUDA = torch.device("cuda")


class RerunGraph:
    """A step graph on the CPU: capturing runs nothing that stays (the gradients and the
    counter are put back as they were), replaying reruns the step into the captured loss."""

    def __init__(self, model: torch.nn.Module, counter: CommunicationCounter | None) -> None:
        self.model, self.counter = model, counter
        self.run: Callable[[], torch.Tensor] | None = None
        self.loss: torch.Tensor | None = None

    def capture(self, run: Callable[[], torch.Tensor]) -> torch.Tensor:
        grads = [p.grad.clone() for p in self.model.parameters()]
        self.run, self.loss = run, run()
        for parameter, grad in zip(self.model.parameters(), grads, strict=True):
            parameter.grad.copy_(grad)
        return self.loss

    def replay(self) -> None:
        recorded = None if self.counter is None else len(self.counter.history)
        self.loss.copy_(self.run())
        if self.counter is not None:  # a CUDA graph's replay runs no Python: nothing recorded
            history = self.counter.history[:recorded]
            self.counter.reset()
            for exchange in history:
                self.counter.record(*exchange)


@pytest.mark.parametrize(
    ("setting", "device", "options", "reason"),
    [
        ("off", CUDA, {}, "run.cuda_graphs is off"),
        ("on", torch.device("cpu"), {}, "runs on the CPU, and CUDA graphs need a GPU"),
        ("on", CUDA, {"host_staging": True, "group_size": 2}, "gloo"),
        ("on", CUDA, {"batch_norm": True}, "model.batch_norm"),
        ("on", CUDA, {"own_model": True}, "model.target"),
        ("auto", CUDA, {"group_size": 4}, "a graph group of 4 ranks"),
    ],
)
def test_why_a_step_is_not_captured(setting, device, options, reason):
    settings = {"batch_norm": False, "own_model": False, "group_size": 1, "host_staging": False}
    settings.update(options)
    refusal = capture_refusal(setting, device, **settings)
    assert refusal is not None and reason in refusal and "\n" not in refusal


@pytest.mark.parametrize("setting", ["auto", "on"])
def test_a_captured_step_is_possible_on_a_gpu(setting):
    kwargs = {"batch_norm": False, "own_model": False, "host_staging": False}
    assert capture_refusal(setting, CUDA, group_size=1, **kwargs) is None
    assert (capture_refusal(setting, CUDA, group_size=2, **kwargs) is None) == (setting == "on")


def _trainer(dataset, folder, **run) -> Trainer:
    folder.mkdir(parents=True, exist_ok=True)
    config = write_config(
        folder / "config.yaml", data={"graphs": str(dataset["graphs"])},
        optim={"epochs": 4, "lr": 0.003, "warmup_steps": 1},
        run={"dir": str(folder / "run"), "checkpoint_every": 1000, **run},
    )  # fmt: skip
    return Trainer(load_config(config), init_distributed(device="cpu", timeout_s=60))


def _rerun_step(trainer: Trainer) -> CapturedStep:
    return CapturedStep(
        trainer.model, trainer.settings, counter=trainer.counter,
        new_graph=lambda: RerunGraph(trainer.model, trainer.counter),
    )  # fmt: skip


def test_replayed_shapes_step_as_the_plain_step(dataset, tmp_path):
    trainer = _trainer(dataset, tmp_path)
    try:
        first = trainer.source.item(0)
        # Another event of the same shape: other features and truth on the same edges.
        other = dataclasses.replace(
            first, x=first.x + 0.5 * torch.randn_like(first.x),
            edge_attr=first.edge_attr * 0.75, y=1.0 - first.y,
        )  # fmt: skip
        captured = _rerun_step(trainer)
        for item in (first, first, other, first, other, other):
            trainer.model.zero_grad(set_to_none=False)
            loss = captured(item)
            grads = [p.grad.clone() for p in trainer.model.parameters()]
            trainer.model.zero_grad(set_to_none=False)
            plain = forward_backward(trainer.model, item, trainer.settings)
            assert relative_error(loss, plain) <= 1e-12
            for grad, parameter in zip(grads, trainer.model.parameters(), strict=True):
                assert relative_error(grad, parameter.grad) <= 1e-12
        assert captured.counts == {"eager": 1, "captured": 1, "replayed": 5}
    finally:
        destroy_distributed(trainer.context)


def test_training_with_replayed_steps_learns_the_plain_weights(dataset, tmp_path):
    weights = []
    for captured in (False, True):
        trainer = _trainer(dataset, tmp_path / str(captured))
        try:
            if captured:
                trainer.captured_step = _rerun_step(trainer)
            trainer.fit()
            weights.append([p.detach().clone() for p in trainer.model.parameters()])
            if captured:  # 3 events, 4 epochs: each shape's step run, captured, replayed twice
                counts = trainer.captured_step.counts
                assert counts["captured"] >= 1 and counts["replayed"] >= counts["captured"] + 1
                assert sum(counts.values()) - counts["captured"] == 12
                assert trainer.captured_step.tally().startswith(
                    f"CUDA graphs: {counts['replayed']} step(s) replayed, "
                )
        finally:
            destroy_distributed(trainer.context)
    for plain, replayed in zip(*weights, strict=True):
        assert relative_error(replayed, plain) <= 1e-10


def test_asking_for_cuda_graphs_on_the_cpu_says_so_in_one_line(dataset, tmp_path, capsys):
    for setting, said in (("on", True), ("auto", False), ("off", False)):
        trainer = _trainer(dataset, tmp_path / setting, cuda_graphs=setting)
        destroy_distributed(trainer.context)
        lines = [line for line in capsys.readouterr().err.splitlines() if "uncaptured" in line]
        assert trainer.captured_step is None
        assert lines == (
            ["partgnn: notice: the step runs uncaptured: the step runs on the CPU, and CUDA "
             "graphs need a GPU"] if said else []
        ), setting  # fmt: skip
