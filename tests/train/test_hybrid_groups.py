"""Graph x data parallelism: G graph groups of P ranks each, launched with torchrun and mpirun,
equal the exact reference in float64 (one process: each step's weights move by the mean of the
per-event full-graph gradients of the step's events), with no training event skipped.

The dataset has 3 training events: with G = 2 every epoch has a full step (2 events, one per
group) and a step with 1 event (the second group contributes zeros; the mean is over 1). The
2 x 3 case draws each step's events from one of 2 size buckets (``run.sampling:
size_buckets``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

from partgnn.distributed.process_group import destroy_distributed, init_distributed
from partgnn.train.config.config_file import load_config
from partgnn.train.items.sampling import epoch_steps
from partgnn.train.run_directory.saved_model import SavedModel
from partgnn.train.schedule import learning_rate_factor
from partgnn.train.step import training_loss
from partgnn.train.trainer import Trainer
from tests.distributed.launch import child_env
from tests.forkserver import forked_bin
from tests.subprocesses import run_command
from tests.train.conftest import write_config

BIN = Path(sys.executable).parent
GROUPS = 2
EPOCHS = 2


def _config(path: Path, dataset, mode: str, parts: int, sampling: str) -> Path:
    return write_config(
        path,
        mode=mode,
        data={"graphs": str(dataset["graphs"]), "shards": str(dataset[f"phi{parts}"])},
        optim={"epochs": EPOCHS},
        run={"dir": str(path.with_suffix("")), "sampling": sampling, "size_buckets": 2},
    )


def _reference(dataset, folder: Path, sampling: str) -> dict[str, torch.Tensor]:
    """The exact reference, one process: per step, the mean of the per-event losses of the
    step's events (the trainer's full-mode event loss), back-propagated; then the trainer's
    clipping, AdamW and schedule."""
    config = load_config(_config(folder / f"full-{sampling}.yaml", dataset, "full", 1, sampling))
    context = init_distributed(device="cpu", timeout_s=60)
    try:
        trainer = Trainer(config, context)
        run = config.run
        steps = [
            epoch_steps(
                trainer.train_indices, GROUPS, seed=run.seed, epoch=epoch, sampling=run.sampling,
                sizes=[trainer.source.event_size(i) for i in trainer.train_indices],
                n_buckets=run.size_buckets,
            )
            for epoch in range(EPOCHS)
        ]  # fmt: skip
        assert sorted(len(step) for step in steps[0]) == [1, 2]  # the case under test
        # The cosine schedule spans the hybrid run's steps (G events per step, not one).
        schedule = learning_rate_factor(
            config.optim, total_steps=sum(len(epoch) for epoch in steps), events_per_step=1
        )
        trainer.scheduler = torch.optim.lr_scheduler.LambdaLR(trainer.optimizer, schedule)
        for epoch in steps:
            for events in epoch:
                trainer.optimizer.zero_grad()
                losses = [
                    training_loss(trainer.model, trainer.source.item(index), trainer.settings)
                    for index in events
                ]
                (sum(losses) / len(events)).backward()
                torch.nn.utils.clip_grad_norm_(trainer.model.parameters(), config.optim.grad_clip)
                trainer.optimizer.step()
                trainer.scheduler.step()
        return {name: value.clone() for name, value in trainer.model.state_dict().items()}
    finally:
        trainer.source.close()
        destroy_distributed(context)


def _launch(launcher: str, n_processes: int, config: Path, workdir: Path) -> None:
    # torchrun and its ranks start forked (tests/forkserver.py); mpirun's ranks as installed.
    bin_dir = forked_bin() if launcher == "torchrun" else BIN
    command = {
        "torchrun": [str(bin_dir / "torchrun"), "--standalone", "--nproc-per-node",
                     str(n_processes)],
        "mpirun": [str(bin_dir / "mpirun"), "-n", str(n_processes)],
    }[launcher]  # fmt: skip
    env = child_env(PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    done = run_command(
        [*command, str(bin_dir / "partgnn"), "train", "--config", str(config)], cwd=workdir,
        env=env,
    )  # fmt: skip
    assert done.returncode == 0, f"{launcher}: exit {done.returncode}\n{done.stderr[-3000:]}"


@pytest.mark.slow
@pytest.mark.parametrize(("parts", "sampling"), [(2, "random"), (3, "size_buckets")])
def test_hybrid_groups_equal_the_exact_reference_under_torchrun_and_mpirun(
    dataset, tmp_path, parts, sampling
):
    reference = _reference(dataset, tmp_path, sampling)
    weights = {}
    for launcher in ("torchrun", "mpirun"):
        config = _config(tmp_path / f"halo-{launcher}.yaml", dataset, "halo", parts, sampling)
        _launch(launcher, GROUPS * parts, config, tmp_path)
        run = config.with_suffix("")
        checkpoint = SavedModel.read(run / "checkpoints" / "last.pt")
        weights[launcher] = checkpoint.weights
        assert checkpoint.step == 2 * EPOCHS  # 3 events, 2 groups: 2 steps per epoch
        workload = json.loads((run / "summary.json").read_text())["workload"]
        waiting = workload["gradient_wait_fraction_per_rank"]
        assert len(waiting) == GROUPS * parts and all(0 <= w < 1 for w in waiting), workload
    for name, value in reference.items():
        got = weights["torchrun"][name]
        error = ((got - value).norm() / value.norm().clamp(min=1e-300)).item()
        assert error <= 1e-9, f"{name}: relative error {error:.3g} ({GROUPS} x {parts})"
        assert torch.equal(weights["mpirun"][name], got), f"{name}: mpirun != torchrun"


@pytest.mark.parametrize(("scaling", "factor"), [("none", 1.0), ("linear", 4.0), ("sqrt", 2.0)])
def test_the_trainers_schedule_scales_with_its_events_per_step(dataset, tmp_path, scaling, factor):
    """The trainer's scheduler follows :func:`learning_rate_factor` of its G (here 1: mode full
    has one event per step, nothing to scale; G = 4 as with 4 graph groups)."""
    config = load_config(_config(tmp_path / "full.yaml", dataset, "full", 1, "random"))
    config.optim.lr_scaling = scaling
    context = init_distributed(device="cpu", timeout_s=60)
    try:
        trainer = Trainer(config, context)
        trainer.source.close()
    finally:
        destroy_distributed(context)
    assert trainer.events_per_step == 1
    ours = learning_rate_factor(config.optim, total_steps=trainer.total_steps, events_per_step=1)
    four = learning_rate_factor(config.optim, total_steps=trainer.total_steps, events_per_step=4)
    for step in range(3):
        assert trainer.scheduler.lr_lambdas[0](step) == ours(step)
        assert four(step) == pytest.approx(factor * ours(step))
    assert trainer.scheduler.get_last_lr()[0] == pytest.approx(config.optim.lr * ours(0))
