"""Tests of partgnn.train.planning.footprint: the fitted bytes per edge and node predict other
graphs."""

from __future__ import annotations

import gc

import pytest
import torch

from partgnn.distributed.in_process_exchanges import LoopbackExchange
from partgnn.memory.heap_release import RELEASE_MIN_BYTES
from partgnn.memory.meters import heap_meter_available
from partgnn.train.config.config_file import load_config
from partgnn.train.planning import footprint

pytestmark = [
    pytest.mark.skipif(not heap_meter_available(), reason="needs glibc mallinfo2"),
    pytest.mark.heap_meter,
]


@pytest.fixture
def small_resident_probe(monkeypatch):
    """The held-bytes probe at test size (it is ~1e6 edges at H = 16)."""
    monkeypatch.setattr(footprint, "RESIDENT_PROBE_EDGE_BYTES", 2**20)


def _config(*overrides):
    return load_config(
        None, ["data.graphs=unused.h5", "model.hidden=16", "model.steps=2", *overrides]
    )


def _checkpointing(checkpoint: bool) -> str:
    return f"model.recompute={str(checkpoint).lower()}"


@pytest.fixture(scope="module")
def fits() -> dict[bool, footprint.Footprint]:
    """The footprints without and with checkpointing, measured once for the module (the
    held-bytes probe at test size)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(footprint, "RESIDENT_PROBE_EDGE_BYTES", 2**20)
        cpu = torch.device("cpu")
        return {
            checkpoint: footprint.measure_footprint(_config(_checkpointing(checkpoint)), 4, 7, cpu)
            for checkpoint in (False, True)
        }


@pytest.mark.parametrize("checkpoint", [False, True])
def test_the_fit_predicts_a_larger_graph(fits, checkpoint):
    config = _config(_checkpointing(checkpoint))
    cpu = torch.device("cpu")
    fit = fits[checkpoint]
    assert fit.per_edge > 0 and fit.per_node > 0
    # A graph outside the probes (more edges, another density): measured directly.
    nodes, edges = 24_000, 400_000
    measured = footprint._step_peak(config, 4, 7, cpu, nodes, edges, torch.Generator())
    assert fit.live_bytes(nodes, edges) == pytest.approx(measured.live, rel=0.05)
    # What the process holds is more than the live bytes, never less.
    assert fit.resident_factor >= 1 and fit.released_factor >= 1
    assert fit.bytes(nodes, edges) >= fit.live_bytes(nodes, edges)
    assert fit.edge_width == (16 if checkpoint else 0)  # only recomputing MLPs release


def test_the_held_bytes_probe_maps_its_edge_tensors_whole_like_an_event_sized_rank():
    assert footprint.resident_probe_graph(32) == (32_768, 524_288)  # (E, 32) float32: 64 MiB
    assert footprint.resident_probe_graph(128) == (16_384, 262_144)  # never below the probes


def test_graphs_whose_recomputed_edge_mlps_release_their_heap_use_the_released_factor():
    fit = footprint.Footprint(1.0, 1.0, 0.0, (), resident_factor=1.5, released_factor=1.2,
                              edge_width=32)  # fmt: skip
    large = RELEASE_MIN_BYTES // (32 * 4)
    assert fit.factor(large) == 1.2 and fit.factor(large - 1) == 1.5
    assert fit.bytes(10, large) == pytest.approx(1.2 * (10 + large))
    kept = footprint.Footprint(1.0, 1.0, 0.0, (), resident_factor=1.5, released_factor=1.2)
    assert kept.factor(10 * large) == 1.5  # no checkpointing: nothing is released


def test_checkpointing_needs_less_per_edge_and_halo_mode_runs_the_exchange(
    fits, small_resident_probe
):
    cpu = torch.device("cpu")
    assert fits[True].per_edge < 0.5 * fits[False].per_edge
    halo = _config("mode=halo", "data.shards=unused")
    assert footprint.measure_footprint(halo, 4, 7, cpu).per_edge > 0


def test_loopback_exchange_appends_copies_of_owned_rows():
    exchange = LoopbackExchange(torch.tensor([2, 0]), 3, hide_communication=True)
    x = torch.arange(6.0).reshape(3, 2)
    assert exchange(x).tolist() == [[0, 1], [2, 3], [4, 5], [4, 5], [0, 1]]
    assert exchange.start(x).wait().tolist() == [[4, 5], [0, 1]]
    assert exchange.n_halo == 2 and exchange.hides_communication


class _CyclicGarbage:
    """Unreachable, but only a cycle collection frees it (as a finished Trainer: its scheduler
    holds a bound method of it); holds 32 MB of tensor."""

    def __init__(self) -> None:
        self.me = self
        self.tensor = torch.ones(8 * 2**20)


def test_garbage_left_from_before_does_not_lower_a_probe_peak(monkeypatch):
    config = _config("model.recompute=false")
    cpu = torch.device("cpu")

    def peak() -> int:
        generator = torch.Generator().manual_seed(0)
        return footprint._step_peak(config, 4, 7, cpu, 4096, 32_768, generator).live

    clean = peak()
    build = footprint.build_model

    def build_after_a_collection(*args, **kwargs):
        gc.collect()  # a collection the step's own allocations set off, inside the measurement
        return build(*args, **kwargs)

    monkeypatch.setattr(footprint, "build_model", build_after_a_collection)
    _CyclicGarbage()
    # Without a collection before the measurement: 5.7 MB measured instead of 41 MB.
    assert peak() > 0.9 * clean


def test_probes_run_in_as_many_chunks_as_an_event_on_every_device():
    """16 chunks per edge MLP on a CPU (an event's too); one on a GPU of 32 GB at width 128."""
    from partgnn.models import chunk_size

    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert footprint.probe_graphs(cpu) == footprint.PROBE_GRAPHS
    for _, edges in footprint.probe_graphs(cpu):
        size = chunk_size.chunk_edges(edges, 64, 4, None, cpu)
        assert chunk_size.chunk_count(edges, size) == chunk_size.EDGE_CHUNKS
    gpu_chunk = int(chunk_size.GPU_CHUNK_SHARE * 32e9)
    for _, edges in footprint.probe_graphs(cuda):
        assert chunk_size.chunk_edges(edges, 128, 4, gpu_chunk, cuda) >= edges
