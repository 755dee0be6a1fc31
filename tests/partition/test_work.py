"""Tests of partgnn.partition.work: per-rank work agrees with the halo plans' counts."""

from __future__ import annotations

import numpy as np
import pytest

from partgnn.partition.halo_plan import build_halo_plans
from partgnn.partition.statistics import partition_statistics
from partgnn.partition.work import (
    HALO_NODE_COST,
    OWNED_NODE_COST,
    imbalance,
    partition_work,
    rank_work,
)


@pytest.mark.parametrize(("n_nodes", "n_edges", "n_parts"), [(40, 90, 3), (200, 600, 5), (7, 0, 2)])
def test_partition_work_equals_the_halo_plans_counts(
    n_nodes: int, n_edges: int, n_parts: int
) -> None:
    rng = np.random.default_rng(n_nodes)
    edges = rng.integers(0, n_nodes, size=(2, n_edges))
    part = rng.integers(0, n_parts, size=n_nodes)
    statistics = partition_statistics(build_halo_plans(edges, part, n_parts), edges)
    expected = (
        statistics.local_edges
        + OWNED_NODE_COST * statistics.owned_nodes
        + HALO_NODE_COST * statistics.halo_nodes
    )
    assert partition_work(edges, part, n_parts).tolist() == expected.tolist()
    assert statistics.work.tolist() == expected.tolist()
    assert statistics.work_imbalance == pytest.approx(expected.max() / expected.mean())


def test_a_path_cut_in_the_middle() -> None:
    # 0 -> 1 -> 2 -> 3, parts {0, 1} and {2, 3}: each side computes the cut edge 1 -> 2 and
    # holds the far endpoint as a halo node.
    edges = np.array([[0, 1, 2], [1, 2, 3]])
    work = partition_work(edges, np.array([0, 0, 1, 1]), 2)
    assert work.tolist() == [2 + 2 * OWNED_NODE_COST + 1, 2 + 2 * OWNED_NODE_COST + 1]


def test_rank_work_and_imbalance() -> None:
    work = rank_work(np.array([10, 20]), np.array([1, 2]), np.array([0, 4]))
    assert work.tolist() == [10 + OWNED_NODE_COST, 20 + 2 * OWNED_NODE_COST + 4 * HALO_NODE_COST]
    assert imbalance(np.array([1.0, 3.0])) == 1.5
    assert imbalance(np.zeros(3)) == 1.0
