import math

import numpy as np

from partgnn.partition.halo_plan import build_halo_plans
from partgnn.partition.statistics import partition_statistics, summarize

PATH = np.array([[0, 1, 2, 3], [1, 2, 3, 4]])


def test_statistics_of_a_path_cut_once():
    assignment = np.array([0, 0, 1, 1, 1])
    plans = build_halo_plans(PATH, assignment, 2)
    stats = partition_statistics(plans, PATH, y=np.array([1, 1, 0, 1]))
    assert stats.edge_cut_fraction == 0.25
    assert stats.true_edge_cut_fraction == 1 / 3
    assert stats.owned_nodes.tolist() == [2, 3]
    assert stats.halo_nodes.tolist() == [1, 1]
    assert stats.halo_ratio.tolist() == [0.5, 1 / 3]
    assert stats.local_edges.tolist() == [2, 3]
    assert stats.neighbours.tolist() == [1, 1]
    assert stats.node_imbalance == 3 / 2.5
    assert stats.edge_imbalance == 3 / 2.5
    assert stats.bytes_per_exchange(hidden=8).tolist() == [32, 32]
    summary = summarize([stats], hidden=8)
    assert summary["bytes_per_exchange_total"] == 64
    assert summary["events"] == 1


def test_statistics_without_truth_and_with_empty_parts():
    plans = build_halo_plans(PATH, np.zeros(5, dtype=int), 3)
    stats = partition_statistics(plans, PATH)
    assert math.isnan(stats.true_edge_cut_fraction)
    assert stats.edge_cut_fraction == 0.0
    assert stats.node_imbalance == 3.0
    assert stats.halo_ratio.tolist() == [0.0, 0.0, 0.0]
    assert stats.to_dict()["send_rows"] == [0, 0, 0]
