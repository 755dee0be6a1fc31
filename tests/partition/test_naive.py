import numpy as np
import pytest

from partgnn.errors import InputError
from partgnn.partition.halo_plan import build_halo_plans
from partgnn.partition.naive import extended_sector, naive_sector

PATH = np.array([[0, 1, 2, 3], [1, 2, 3, 4]])  # 0 -> 1 -> 2 -> 3 -> 4
ASSIGNMENT = np.array([0, 0, 1, 1, 1])


def test_naive_sector_drops_cut_edges():
    plans = build_halo_plans(PATH, ASSIGNMENT, 2)
    first, second = (naive_sector(plan) for plan in plans)
    assert first.nodes.tolist() == [0, 1] and first.edge_ids.tolist() == [0]
    assert second.nodes.tolist() == [2, 3, 4] and second.edge_ids.tolist() == [2, 3]
    assert second.edge_index.tolist() == [[0, 1], [1, 2]]
    lost = set(range(4)) - set(first.edge_ids) - set(second.edge_ids)
    assert lost == {1}  # the boundary edge 1 -> 2


def test_extended_sector_of_zero_hops_is_the_naive_sector():
    plans = build_halo_plans(PATH, ASSIGNMENT, 2)
    for plan in plans:
        naive = naive_sector(plan)
        extended = extended_sector(PATH, ASSIGNMENT, plan.rank, 0, 2)
        assert np.array_equal(naive.nodes, extended.nodes)
        assert np.array_equal(naive.edge_ids, extended.edge_ids)
        assert np.array_equal(naive.edge_index, extended.edge_index)


def test_extended_sector_replicates_a_margin_and_counts_every_edge_once():
    one_hop = [extended_sector(PATH, ASSIGNMENT, rank, 1, 2) for rank in range(2)]
    assert one_hop[0].nodes.tolist() == [0, 1, 2]
    assert one_hop[1].nodes.tolist() == [2, 3, 4, 1]
    assert one_hop[0].n_owned == 2 and one_hop[1].n_owned == 3
    counted = np.concatenate([s.edge_ids[s.edge_owned] for s in one_hop])
    assert sorted(counted.tolist()) == [0, 1, 2, 3]
    two_hops = extended_sector(PATH, ASSIGNMENT, 0, 2, 2)
    assert two_hops.nodes.tolist() == [0, 1, 2, 3]
    local = two_hops.nodes[two_hops.edge_index]
    assert np.array_equal(local, PATH[:, two_hops.edge_ids])


def test_negative_margin_is_rejected():
    with pytest.raises(InputError, match="margin must be >= 0"):
        extended_sector(PATH, ASSIGNMENT, 0, -1, 2)
