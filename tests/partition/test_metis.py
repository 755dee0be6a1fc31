"""Tests of partgnn.partition.metis: CSR input, METIS k-way, degree weights, tiny graphs."""

from __future__ import annotations

import numpy as np
import pymetis
import pytest

from partgnn.errors import InputError
from partgnn.partition import metis
from partgnn.partition.metis import check_edge_index, metis_partition, undirected_csr
from partgnn.partition.work import imbalance, partition_work

# Two triangles {0, 1, 2} and {3, 4, 5} joined by the edge 2 -> 3, one direction per edge.
TWO_TRIANGLES = np.array([[0, 1, 2, 3, 4, 5, 2], [1, 2, 0, 4, 5, 3, 3]])


def random_edges(n_nodes: int, n_edges: int, seed: int) -> np.ndarray:
    """Random directed edges among the first two thirds of the nodes; the rest stay isolated."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, max(1, 2 * n_nodes // 3), size=(2, n_edges))


def edge_imbalance(edge_index: np.ndarray, part: np.ndarray, n_parts: int) -> float:
    """Max / mean of the edges per part, an edge counted in the part of its target."""
    counts = np.bincount(part[edge_index[1]], minlength=n_parts)
    return float(counts.max() / counts.mean())


@pytest.fixture(scope="module")
def sparse_event_edges(sparse_event_graph) -> tuple[np.ndarray, int]:
    return sparse_event_graph.edge_index.numpy(), sparse_event_graph.num_nodes


def test_metis_really_partitions_a_tiny_graph() -> None:
    # Capability probe: pymetis is installed and cuts the one bridge between two triangles.
    part = metis_partition(TWO_TRIANGLES, 6, 2)
    assert len(set(part[:3])) == 1 and len(set(part[3:])) == 1
    assert part[0] != part[3]


def test_undirected_csr_symmetrises_deduplicates_and_drops_self_loops() -> None:
    edges = np.array([[0, 1, 1, 2, 2, 0], [1, 0, 2, 2, 0, 1]])
    xadj, adjncy = undirected_csr(edges, 4)
    assert xadj.dtype == np.int32 and adjncy.dtype == np.int32
    assert xadj.tolist() == [0, 2, 4, 6, 6]
    assert adjncy.tolist() == [1, 2, 0, 2, 0, 1]


def test_undirected_csr_of_a_graph_without_edges() -> None:
    xadj, adjncy = undirected_csr(np.zeros((2, 0), dtype=np.int64), 3)
    assert xadj.tolist() == [0, 0, 0, 0]
    assert adjncy.size == 0


@pytest.mark.parametrize("n_parts", range(1, 9))
@pytest.mark.parametrize("n_nodes", [9, 40, 300])
def test_values_in_range_every_part_used_and_deterministic(n_nodes: int, n_parts: int) -> None:
    edges = random_edges(n_nodes, 2 * n_nodes, seed=n_nodes + n_parts)
    part = metis_partition(edges, n_nodes, n_parts, seed=3)
    assert part.shape == (n_nodes,) and part.dtype == np.int64
    assert part.min() >= 0 and part.max() < n_parts
    # METIS leaves parts of such small graphs empty; the fix-up refills them.
    assert np.bincount(part, minlength=n_parts).min() >= 1
    assert np.array_equal(part, metis_partition(edges, n_nodes, n_parts, seed=3))


def test_torch_edge_index_gives_the_same_partition() -> None:
    torch = pytest.importorskip("torch")
    edges = random_edges(200, 500, seed=1)
    assert np.array_equal(
        metis_partition(torch.from_numpy(edges), 200, 4), metis_partition(edges, 200, 4)
    )


def test_one_part_is_all_zeros_without_metis(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pymetis, "part_graph", _no_metis)
    part = metis_partition(TWO_TRIANGLES, 6, 1)
    assert part.tolist() == [0] * 6 and part.dtype == np.int64


def test_more_parts_than_nodes_puts_each_node_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pymetis, "part_graph", _no_metis)
    assert metis_partition(np.array([[0, 1], [1, 2]]), 3, 5).tolist() == [0, 1, 2]
    assert metis_partition(TWO_TRIANGLES, 6, 6).tolist() == list(range(6))


def test_graph_without_nodes() -> None:
    part = metis_partition(np.zeros((2, 0), dtype=np.int64), 0, 4)
    assert part.shape == (0,) and part.dtype == np.int64


def test_graph_without_edges_is_split_into_equal_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pymetis, "part_graph", _no_metis)
    no_edges = np.zeros((2, 0), dtype=np.int64)
    assert metis_partition(no_edges, 10, 3).tolist() == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    # Self-loops are no edges for METIS either.
    self_loops = np.array([[0, 5, 9], [0, 5, 9]])
    assert np.array_equal(metis_partition(self_loops, 10, 3), metis_partition(no_edges, 10, 3))


def test_isolated_nodes_are_partitioned_and_balanced() -> None:
    # 100 nodes on a path, 100 isolated nodes: METIS balances the work of both kinds.
    path = np.stack([np.arange(99), np.arange(1, 100)])
    part = metis_partition(path, 200, 4)
    assert part.shape == (200,)
    assert imbalance(partition_work(path, part, 4)) < 1.1


def test_empty_parts_are_refilled_from_the_heaviest_part() -> None:
    # METIS tends to leave parts of such tiny graphs empty (it put a 3-node path in one part).
    path = np.array([[0, 1], [1, 2]])
    part = metis_partition(path, 4, 3)
    assert sorted(np.bincount(part, minlength=3)) == [1, 1, 2]
    fixed = metis._fill_empty_parts(
        np.array([1, 1, 1, 1]), 3, weights=np.array([2, 3, 3, 2]), degree=np.array([1, 2, 2, 1])
    )
    # Part 0 gets the lowest-degree node 0, part 2 the next one, node 3.
    assert fixed.tolist() == [0, 1, 1, 2]


def test_seed_is_passed_to_metis(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    part_graph = pymetis.part_graph

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(kwargs["options"].seed)
        return part_graph(*args, **kwargs)

    monkeypatch.setattr(pymetis, "part_graph", spy)
    metis_partition(random_edges(300, 600, seed=0), 300, 4, seed=1234)
    # "work" weighting calls METIS once, then up to WORK_REFINEMENTS more times.
    assert 1 <= len(seen) <= 1 + metis.WORK_REFINEMENTS and set(seen) == {1234}


@pytest.mark.parametrize("n_parts", range(2, 9))
def test_balanced_in_edges_on_a_simulated_graph(
    sparse_event_edges: tuple[np.ndarray, int], n_parts: int
) -> None:
    edges, n_nodes = sparse_event_edges
    part = metis_partition(edges, n_nodes, n_parts)
    # Half of a node's weight is the node itself at ~1 edge per node, so edges balance less
    # tightly than on a dense pile-up-200 graph (1.03 there); measured 1.04-1.19 here.
    assert edge_imbalance(edges, part, n_parts) < 1.3
    cut = (part[edges[0]] != part[edges[1]]).mean()
    assert cut < 0.1


def test_degree_weights_balance_edges_better_than_unit_weights(
    sparse_event_edges: tuple[np.ndarray, int],
) -> None:
    edges, n_nodes = sparse_event_edges
    for n_parts in (2, 4, 8):
        by_degree = metis_partition(edges, n_nodes, n_parts, vertex_weights="degree")
        by_unit = metis_partition(edges, n_nodes, n_parts, vertex_weights="unit")
        degree_imbalance = edge_imbalance(edges, by_degree, n_parts)
        unit_imbalance = edge_imbalance(edges, by_unit, n_parts)
        # Measured on the realistic simulation (module planes, field profile, secondaries):
        # 1.018 vs 1.019 at P = 2, 1.025 vs 1.051 at P = 4, 1.055 vs 1.190 at P = 8 (on the
        # ideal detector's events 1.005 vs 1.035, 1.10 vs 1.38, 1.10 vs 1.47): at P = 2 unit
        # weights balance this graph too, so both must merely balance within 5 %; degree
        # weights must do better at P = 4 and by a margin at P = 8.
        if n_parts == 2:
            assert max(degree_imbalance, unit_imbalance) < 1.05, (degree_imbalance, unit_imbalance)
            continue
        margin = 0.1 if n_parts == 8 else 0.0
        assert degree_imbalance < unit_imbalance - margin, (
            n_parts,
            degree_imbalance,
            unit_imbalance,
        )


def test_work_weights_balance_work_better_than_degree_weights(
    sparse_event_edges: tuple[np.ndarray, int],
) -> None:
    edges, n_nodes = sparse_event_edges
    for n_parts in (2, 4, 8):
        by_work = metis_partition(edges, n_nodes, n_parts)
        by_degree = metis_partition(edges, n_nodes, n_parts, vertex_weights="degree")
        work_imbalance = imbalance(partition_work(edges, by_work, n_parts))
        degree_imbalance = imbalance(partition_work(edges, by_degree, n_parts))
        # Measured here: 1.000 vs 1.003, 1.009 vs 1.047, 1.011 vs 1.074 (the refinements keep
        # the best of three partitions, so work weighting can only lose to chance).
        assert work_imbalance < 1.03, (n_parts, work_imbalance)
        assert work_imbalance < degree_imbalance, (n_parts, work_imbalance, degree_imbalance)
        cut = (by_work[edges[0]] != by_work[edges[1]]).mean()
        assert cut < 0.1


@pytest.mark.parametrize(
    ("edge_index", "message"),
    [
        (np.zeros((3, 2), dtype=np.int64), "edge_index must have shape (2, E) (got (3, 2))"),
        (np.zeros(4, dtype=np.int64), "edge_index must have shape (2, E) (got (4,))"),
        (np.array([[0.0, 1.0], [1.0, 2.0]]), "edge_index must hold integers (got float64)"),
        (np.array([[0, 1], [1, 6]]), "edge_index values must be in [0, 6) (got 6)"),
        (np.array([[0, -1], [1, 2]]), "edge_index values must be in [0, 6) (got -1)"),
    ],
)
def test_bad_edge_index(edge_index: np.ndarray, message: str) -> None:
    with pytest.raises(InputError) as info:
        metis_partition(edge_index, 6, 2)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_parts": 0}, "parts must be >= 1 (got 0)"),
        ({"n_parts": -3}, "parts must be >= 1 (got -3)"),
        ({"n_parts": 2.5}, "parts must be an integer (got 2.5)"),
        ({"n_parts": True}, "parts must be an integer (got True)"),
        ({"seed": -1}, "seed must be an integer in [0, 2**31) (got -1)"),
        ({"seed": 2**31}, "seed must be an integer in [0, 2**31) (got 2147483648)"),
        (
            {"vertex_weights": "edges"},
            "unknown vertex weighting 'edges' (choose work, degree, unit)",
        ),
        ({"num_nodes": -1}, "number of nodes must be an integer >= 0 (got -1)"),
    ],
)
def test_bad_arguments(kwargs: dict, message: str) -> None:
    arguments = {"edge_index": TWO_TRIANGLES, "num_nodes": 6, "n_parts": 2} | kwargs
    with pytest.raises(InputError) as info:
        metis_partition(**arguments)
    assert str(info.value) == message


def test_check_edge_index_accepts_an_empty_float_array() -> None:
    # torch.empty((2, 0)) is float by default; an empty edge list is fine whatever its dtype.
    edges = check_edge_index(np.zeros((2, 0)), 3)
    assert edges.shape == (2, 0) and edges.dtype == np.int64


def _no_metis(*args: object, **kwargs: object) -> object:
    raise AssertionError("METIS must not be called here")
