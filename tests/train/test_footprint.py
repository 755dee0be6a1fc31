"""Tests of partgnn.train.footprint: the fitted bytes per edge and node predict other graphs."""

from __future__ import annotations

import pytest
import torch

from partgnn.models.memory_probe import heap_meter_available
from partgnn.train import footprint
from partgnn.train.config import load_config

pytestmark = pytest.mark.skipif(not heap_meter_available(), reason="needs glibc mallinfo2")


def _config(tmp_path, *overrides):
    return load_config(
        None, ["data.graphs=unused.h5", "model.hidden=16", "model.steps=2", *overrides]
    )


@pytest.mark.parametrize("checkpoint", [False, True])
def test_the_fit_predicts_a_larger_graph(tmp_path, checkpoint):
    config = _config(tmp_path, f"model.checkpoint={str(checkpoint).lower()}")
    cpu = torch.device("cpu")
    fit = footprint.measure_footprint(config, 4, 7, cpu)
    assert fit.per_edge > 0 and fit.per_node > 0
    # A graph outside the probes (more edges, another density): measured directly.
    nodes, edges = 24_000, 400_000
    measured = footprint._step_peak(config, 4, 7, cpu, nodes, edges, torch.Generator())
    assert fit.bytes(nodes, edges) == pytest.approx(measured, rel=0.05)


def test_checkpointing_needs_less_per_edge_and_halo_mode_runs_the_exchange(tmp_path):
    cpu = torch.device("cpu")
    plain = footprint.measure_footprint(_config(tmp_path), 4, 7, cpu)
    lean = footprint.measure_footprint(_config(tmp_path, "model.checkpoint=true"), 4, 7, cpu)
    assert lean.per_edge < 0.5 * plain.per_edge
    halo = _config(tmp_path, "mode=halo", "data.shards=unused")
    assert footprint.measure_footprint(halo, 4, 7, cpu).per_edge > 0


def test_loopback_exchange_appends_copies_of_owned_rows():
    exchange = footprint.LoopbackExchange(torch.tensor([2, 0]), 3, overlap=True)
    x = torch.arange(6.0).reshape(3, 2)
    assert exchange(x).tolist() == [[0, 1], [2, 3], [4, 5], [4, 5], [0, 1]]
    assert exchange.start(x).wait().tolist() == [[4, 5], [0, 1]]
    assert exchange.n_halo == 2 and exchange.can_overlap
