"""Tests of partgnn.partition.assign: partition_graph, every method, random and event graphs."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from partgnn.data.detector.geometry import default_geometry
from partgnn.data.graphs.graph_builder import GraphBuildConfig, build_event_graph
from partgnn.data.simulation.simulate import SimulationConfig, simulate_event
from partgnn.errors import InputError
from partgnn.partition.assign import METHODS, partition_graph


def random_graph(n_nodes: int, n_edges: int, seed: int) -> Data:
    """Hits on a cylinder; edges join random nodes of the first two thirds, the rest isolated."""
    rng = np.random.default_rng(seed)
    r = rng.uniform(30.0, 1000.0, n_nodes)
    phi = rng.uniform(-math.pi, math.pi, n_nodes)
    z = rng.uniform(-3000.0, 3000.0, n_nodes)
    pos = np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=1)
    edges = rng.integers(0, max(1, 2 * n_nodes // 3), size=(2, n_edges))
    return Data(pos=torch.from_numpy(pos).float(), edge_index=torch.from_numpy(edges))


def edge_imbalance(graph: Data, part: np.ndarray, n_parts: int) -> float:
    """Max / mean of the edges per part, an edge counted in the part of its target."""
    counts = np.bincount(part[graph.edge_index[1].numpy()], minlength=n_parts)
    return float(counts.max() / counts.mean())


def test_methods() -> None:
    assert METHODS == ("metis", "phi", "eta", "phieta")


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("n_parts", range(1, 9))
def test_random_graphs(method: str, n_parts: int) -> None:
    graph = random_graph(300, 600, seed=n_parts)
    part = partition_graph(graph, n_parts, method, seed=5)
    assert isinstance(part, np.ndarray) and part.dtype == np.int64 and part.shape == (300,)
    assert part.min() >= 0 and part.max() < n_parts
    assert np.bincount(part, minlength=n_parts).min() >= 1
    assert np.array_equal(part, partition_graph(graph, n_parts, method, seed=5))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("n_parts", range(1, 9))
def test_simulated_graph(event_graph: Data, method: str, n_parts: int) -> None:
    part = partition_graph(event_graph, n_parts, method)
    n_nodes = event_graph.num_nodes
    assert part.shape == (n_nodes,) and part.min() >= 0 and part.max() < n_parts
    assert np.array_equal(part, partition_graph(event_graph, n_parts, method))
    counts = np.bincount(part, minlength=n_parts)
    if method == "metis":
        # Balanced by work (edges, owned and halo nodes), so in edges to a few percent.
        assert edge_imbalance(event_graph, part, n_parts) < 1.15
        assert counts.max() / counts.mean() < 1.25
    else:
        # Quantile boundaries: within two hits of N / P (2.5% at P = 8 here).
        assert np.abs(counts - n_nodes / n_parts).max() <= 2


def test_one_part_is_all_zeros(event_graph: Data) -> None:
    for method in METHODS:
        part = partition_graph(event_graph, 1, method)
        assert part.dtype == np.int64 and not part.any()


@pytest.mark.parametrize("method", METHODS)
def test_more_parts_than_nodes(method: str) -> None:
    part = partition_graph(random_graph(3, 2, seed=0), 8, method)
    assert part.shape == (3,) and part.min() >= 0 and part.max() < 8
    assert np.bincount(part, minlength=8).max() <= 2


@pytest.mark.parametrize("method", METHODS)
def test_graph_without_edges(method: str) -> None:
    graph = random_graph(40, 0, seed=1)
    part = partition_graph(graph, 4, method)
    assert np.array_equal(np.bincount(part, minlength=4), [10, 10, 10, 10])


def test_metis_without_edge_index_field_partitions_isolated_nodes() -> None:
    graph = Data(pos=torch.zeros(6, 3))
    assert partition_graph(graph, 3, "metis").tolist() == [0, 0, 1, 1, 2, 2]


@pytest.mark.parametrize("method", METHODS)
def test_graph_without_nodes(method: str) -> None:
    graph = Data(pos=torch.zeros(0, 3), edge_index=torch.zeros(2, 0, dtype=torch.long))
    part = partition_graph(graph, 4, method)
    assert part.shape == (0,) and part.dtype == np.int64


@pytest.mark.parametrize("method", METHODS)
def test_isolated_nodes_are_assigned(method: str) -> None:
    # Two thirds of the nodes are connected, the last third has no edge at all.
    graph = random_graph(600, 1200, seed=2)
    part = partition_graph(graph, 4, method)
    isolated = np.setdiff1d(np.arange(600), graph.edge_index.numpy())
    assert isolated.size >= 200
    assert part[isolated].min() >= 0 and part[isolated].max() < 4


def test_assignments_are_identical_in_another_process() -> None:
    # METIS's randomness must come from the seed alone; a fresh interpreter gives the same parts.
    script = """
import json, sys, types
import numpy as np
from partgnn.partition.assign import METHODS, partition_graph
rng = np.random.default_rng(11)
graph = types.SimpleNamespace(
    num_nodes=500, pos=rng.normal(size=(500, 3)) * 500, edge_index=rng.integers(0, 500, (2, 2000))
)
print(json.dumps({m: partition_graph(graph, 6, m, seed=7).tolist() for m in METHODS}))
"""
    rng = np.random.default_rng(11)
    graph = SimpleNamespace(
        num_nodes=500,
        pos=rng.normal(size=(500, 3)) * 500,
        edge_index=rng.integers(0, 500, (2, 2000)),
    )
    here = {m: partition_graph(graph, 6, m, seed=7).tolist() for m in METHODS}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(done.stdout) == here


def test_metis_seed_changes_the_partition_only_through_metis() -> None:
    graph = random_graph(500, 1500, seed=3)
    for method in ("phi", "eta", "phieta"):
        assert np.array_equal(
            partition_graph(graph, 4, method, seed=0), partition_graph(graph, 4, method, seed=9)
        )
    seeds = {tuple(partition_graph(graph, 4, "metis", seed=s)) for s in range(4)}
    assert len(seeds) > 1


def test_grid_is_used_by_phieta(event_graph: Data) -> None:
    by_default = partition_graph(event_graph, 8, "phieta")
    assert np.array_equal(partition_graph(event_graph, 8, "phieta", grid=(4, 2)), by_default)
    assert not np.array_equal(partition_graph(event_graph, 8, "phieta", grid=(2, 4)), by_default)


@pytest.mark.parametrize(
    ("graph", "kwargs", "message"),
    [
        (None, {"n_parts": 0}, "parts must be >= 1 (got 0)"),
        (None, {"n_parts": 0, "method": "phi"}, "parts must be >= 1 (got 0)"),
        (
            None,
            {"method": "foo"},
            "unknown partition method 'foo' (choose metis, phi, eta, phieta)",
        ),
        (None, {"method": "phieta", "grid": (3, 3)}, "grid 3x3 has 9 sectors, not parts = 4"),
        (
            None,
            {"grid": (2, 2)},
            "a sector grid applies to method 'phieta' only (got method 'metis')",
        ),
        (None, {"seed": -2, "method": "eta"}, "seed must be an integer in [0, 2**31) (got -2)"),
        (
            Data(edge_index=torch.zeros(2, 0, dtype=torch.long), num_nodes=5),
            {"method": "phi"},
            "graph has no 'pos' (hit positions), which method 'phi' needs",
        ),
        (
            Data(pos=torch.zeros(4, 3), num_nodes=5),
            {"method": "eta"},
            "pos has 4 rows for 5 nodes",
        ),
        (
            Data(pos=torch.zeros(4, 3), edge_index=torch.tensor([[0], [4]])),
            {},
            "edge_index values must be in [0, 4) (got 4)",
        ),
        (SimpleNamespace(), {}, "graph has no nodes field ('x', 'pos' or 'num_nodes')"),
    ],
)
def test_bad_input_is_one_clear_line(graph: object, kwargs: dict, message: str) -> None:
    arguments = {"n_parts": 4} | kwargs
    with pytest.raises(InputError) as info:
        partition_graph(random_graph(20, 30, seed=0) if graph is None else graph, **arguments)
    assert str(info.value) == message


@pytest.mark.slow
def test_every_method_partitions_a_pileup_200_graph() -> None:
    # Its speed (issue 3: METIS <= 3 s, geometric sectors <= 0.2 s) is a benchmark
    # (tools/bench_partition.py), not a test.
    geometry = default_geometry()
    event = simulate_event(geometry, SimulationConfig(pileup=200), event_id=0, seed=1)
    graph, _ = build_event_graph(event, geometry, GraphBuildConfig(pt_min=0.0))
    assert graph.num_nodes > 80_000 and graph.edge_index.shape[1] > 800_000
    for method in ("metis", "phi", "eta", "phieta"):
        part = np.asarray(partition_graph(graph, 8, method))
        assert part.shape == (graph.num_nodes,), method
        assert set(np.unique(part).tolist()) == set(range(8)), method  # every part used
        if method == "metis":
            assert edge_imbalance(graph, part, 8) < 1.1
