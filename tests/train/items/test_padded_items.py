"""Padding a rank's item to a fixed shape contributes nothing (issue 69, item 1): the shapes
themselves, then a padded step equal to the unpadded one on a whole graph in this process and in
halo mode on 2 real ranks (gloo), equal to the full graph's, in float64."""

from __future__ import annotations

import pytest
import torch

from partgnn.distributed.process_group import destroy_distributed, init_distributed
from partgnn.train.config.config_file import load_config
from partgnn.train.items.padded_items import pad_item, padding_refusal, shape_bucket
from partgnn.train.step import forward_backward
from partgnn.train.trainer import Trainer
from tests.distributed.launch import assert_all_succeeded, launch
from tests.distributed.reference import relative_error
from tests.train.conftest import write_config

#: Padded against unpadded: the same terms plus zeros, summed in another order.
PADDING_BOUND = 1e-12
#: Halo mode against the full graph (the exactness tests' float64 bound).
HALO_BOUND = 1e-10


def test_shapes_are_few_and_at_most_a_quarter_larger():
    counts = range(1, 200_000)
    shapes = [shape_bucket(n) for n in counts]
    assert shape_bucket(0) == 0
    assert all(s >= n for s, n in zip(shapes, counts, strict=True))
    assert all(s <= max(16, n * 1.25) for s, n in zip(shapes, counts, strict=True))
    assert shapes == sorted(shapes)
    assert len(set(shapes)) <= 4 * 18 + 1  # four per octave up to 2**18
    assert shape_bucket(shape_bucket(1000)) == shape_bucket(1000)
    assert [shape_bucket(n) for n in (17, 33, 100, 1025)] == [20, 40, 112, 1280]
    with pytest.raises(ValueError, match="negative"):
        shape_bucket(-1)


def test_batch_norm_is_not_padded():
    assert padding_refusal(batch_norm=False) is None
    assert "statistics" in padding_refusal(batch_norm=True)


def _whole_graph_steps(dataset, tmp_path, **model) -> tuple:
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = write_config(
        tmp_path / "full.yaml", data={"graphs": str(dataset["graphs"])}, model=model,
        run={"dir": str(tmp_path / "run")},
    )  # fmt: skip
    context = init_distributed(device="cpu", timeout_s=60)
    try:
        trainer = Trainer(load_config(config), context)
        item = trainer.source.item(0)
        padded = pad_item(item, trainer.settings.weights, trainer.settings.dtype)
        steps = []
        for one in (item, padded.item):
            trainer.model.zero_grad(set_to_none=True)
            loss = forward_backward(trainer.model, one, trainer.settings)
            grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters()}
            steps.append((grads, loss))
        return steps, padded, item
    finally:
        destroy_distributed(context)


def _error(one: tuple, other: tuple) -> float:
    grads, loss = one
    other_grads, other_loss = other
    errors = [relative_error(grads[name], other_grads[name]) for name in grads]
    return max([relative_error(loss, other_loss), *errors])


def test_a_padded_whole_graph_steps_as_the_graph(dataset, tmp_path):
    (plain, padded_step), padded, item = _whole_graph_steps(dataset, tmp_path)
    shape = padded.shape
    assert shape.n_edges > item.edge_index.shape[1] and shape.n_owned > item.x.shape[0]
    assert torch.equal(padded.item.edge_index[:, : padded.n_edges], item.edge_index)
    assert (padded.item.edge_index[:, padded.n_edges :] == item.x.shape[0]).all()
    assert float(padded.item.weight[padded.n_edges :].abs().sum()) == 0.0
    assert _error(padded_step, plain) <= PADDING_BOUND


@pytest.mark.slow
def test_padded_halo_steps_equal_the_unpadded_and_the_full_graph(dataset, tmp_path):
    (full, _), _, _ = _whole_graph_steps(dataset, tmp_path / "full", recompute=True)
    out = tmp_path / "padded"
    results = launch(
        2, "tests.train.padded_step_worker",
        [str(dataset["graphs"]), str(dataset["phi2"]), str(out)], workdir=tmp_path / "logs",
    )  # fmt: skip
    assert_all_succeeded(results)
    for rank in (0, 1):
        for case in torch.load(out.with_name(f"padded.rank{rank}"), weights_only=False):
            shape = case["shape"]
            assert shape.n_edges > case["n_edges"], case["setting"]
            assert len(shape.send_counts) == 2 and sum(shape.recv_counts) > 0
            assert (shape.n_interior is not None) == case["setting"]["hide"]
            assert _error(case["padded"], case["plain"]) <= PADDING_BOUND, case["setting"]
            assert _error(case["padded"], full) <= HALO_BOUND, case["setting"]
