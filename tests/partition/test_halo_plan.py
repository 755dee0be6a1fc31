import dataclasses

import numpy as np
import pytest

from partgnn.errors import InputError
from partgnn.partition.assign import METHODS, partition_graph
from partgnn.partition.halo_plan import (
    HaloPlan,
    InvalidPlanError,
    build_halo_plans,
    validate_plans,
)

PATH = np.array([[0, 1, 2], [1, 2, 3]])  # 0 -> 1 -> 2 -> 3


def test_path_of_four_nodes_in_two_parts_has_the_known_plans():
    plans = build_halo_plans(PATH, np.array([0, 0, 1, 1]), 2)
    validate_plans(plans, PATH, np.array([0, 0, 1, 1]))
    first, second = plans
    assert first.owned_nodes.tolist() == [0, 1]
    assert first.halo_nodes.tolist() == [2]
    assert first.halo_counts.tolist() == [0, 1]
    assert first.edge_index.tolist() == [[0, 1], [1, 2]]
    assert first.edge_ids.tolist() == [0, 1]
    assert first.edge_owned.tolist() == [True, False]  # edge 1 -> 2 is counted by node 2's owner
    assert first.send_index.tolist() == [1]
    assert first.send_counts.tolist() == [0, 1]
    assert second.owned_nodes.tolist() == [2, 3]
    assert second.halo_nodes.tolist() == [1]
    assert second.local_nodes.tolist() == [2, 3, 1]
    assert second.edge_index.tolist() == [[2, 0], [0, 1]]
    assert second.edge_owned.tolist() == [True, True]
    assert second.send_index.tolist() == [0]
    assert second.send_counts.tolist() == [1, 0]
    assert first.interior_edges.tolist() == [True, False]
    assert first.neighbour_ranks.tolist() == [1]


def test_halo_groups_follow_owner_rank_and_send_order_matches():
    # Node 0 on rank 0 is connected to nodes on ranks 2 and 1 (in that edge order).
    edge_index = np.array([[5, 0, 3, 0, 4], [0, 5, 0, 4, 0]])
    assignment = np.array([0, 0, 1, 1, 1, 2])
    plans = build_halo_plans(edge_index, assignment, 3)
    validate_plans(plans, edge_index, assignment)
    assert plans[0].halo_nodes.tolist() == [3, 4, 5]
    assert plans[0].halo_counts.tolist() == [0, 2, 1]
    assert plans[0].halo_owner.tolist() == [1, 1, 2]
    assert plans[1].send_nodes(0).tolist() == [3, 4]
    assert plans[2].send_nodes(0).tolist() == [5]
    assert plans[0].send_nodes(1).tolist() == plans[0].send_nodes(2).tolist() == [0]


def test_empty_parts_and_one_part():
    plans = build_halo_plans(PATH, np.array([0, 0, 2, 2]), 3)
    validate_plans(plans, PATH, np.array([0, 0, 2, 2]))
    empty = plans[1]
    assert empty.n_owned == empty.n_halo == empty.n_local_edges == 0
    assert empty.edge_index.shape == (2, 0)
    (single,) = build_halo_plans(PATH, np.zeros(4, dtype=int), 1)
    assert single.n_halo == 0 and single.send_index.size == 0
    assert single.edge_index.tolist() == PATH.tolist()
    assert single.edge_owned.all()


def test_no_edges_and_no_nodes():
    plans = build_halo_plans(np.zeros((2, 0), dtype=int), np.array([1, 0, 1]), 2)
    validate_plans(plans, np.zeros((2, 0), dtype=int), np.array([1, 0, 1]))
    assert [p.owned_nodes.tolist() for p in plans] == [[1], [0, 2]]
    plans = build_halo_plans(np.zeros((2, 0), dtype=int), np.zeros(0, dtype=int), 4)
    assert all(p.n_local_nodes == 0 for p in plans)


@pytest.mark.parametrize("n_parts", range(1, 9))
def test_random_graphs_satisfy_every_invariant(n_parts: int):
    rng = np.random.default_rng(n_parts)
    n_nodes = 200
    edge_index = rng.integers(0, n_nodes, size=(2, 800))
    assignment = rng.integers(0, n_parts, size=n_nodes)
    plans = build_halo_plans(edge_index, assignment, n_parts)
    validate_plans(plans, edge_index, assignment)
    owned_edge_ids = np.concatenate([p.edge_ids[p.edge_owned] for p in plans])
    assert np.array_equal(np.sort(owned_edge_ids), np.arange(800))
    # Sending rows of a feature matrix along the plans reproduces every rank's halo rows.
    features = rng.normal(size=(n_nodes, 3))
    for plan in plans:
        received = [
            features[plans[peer].owned_nodes][plans[peer].send_index_to(plan.rank)]
            for peer in range(n_parts)
        ]
        assert np.array_equal(np.concatenate(received), features[plan.halo_nodes])


def _corrupt(plan: HaloPlan, **changes) -> HaloPlan:
    return dataclasses.replace(plan, **changes)


def test_validate_names_broken_invariants():
    rng = np.random.default_rng(0)
    edge_index = rng.integers(0, 50, size=(2, 200))
    assignment = rng.integers(0, 3, size=50)
    plans = build_halo_plans(edge_index, assignment, 3)
    plan = plans[1]
    broken = {
        "edge_owned differs": _corrupt(plan, edge_owned=~plan.edge_owned),
        "halo_nodes not grouped": _corrupt(plan, halo_nodes=plan.halo_nodes[::-1].copy()),
        "send_counts names the rank itself": _corrupt(
            plan, send_counts=plan.send_counts + np.eye(3, dtype=int)[1]
        ),
        "edge_index out of local range": _corrupt(plan, edge_index=plan.edge_index + 10_000),
    }
    for message, bad in broken.items():
        with pytest.raises(InvalidPlanError, match=message):
            bad.validate()
    swapped = list(plans)
    swapped[0], swapped[1] = plans[1], plans[0]
    with pytest.raises(InvalidPlanError, match="plan 0 says rank 1"):
        validate_plans(swapped, edge_index, assignment)
    # A send list that disagrees with the receiver's halo, though each plan is fine alone.
    other = build_halo_plans(edge_index, (assignment + 1) % 3, 3)
    with pytest.raises(InvalidPlanError):
        validate_plans([plans[0], plans[1], other[2]], edge_index, assignment)


def test_bad_partition_input_is_one_clear_line():
    with pytest.raises(InputError, match=r"parts must be >= 1 \(got 0\)"):
        build_halo_plans(PATH, np.zeros(4, dtype=int), 0)
    with pytest.raises(InputError, match=r"assignment has parts outside \[0, 2\)"):
        build_halo_plans(PATH, np.array([0, 1, 2, 0]), 2)
    with pytest.raises(InputError, match="edge_index refers to nodes outside"):
        build_halo_plans(np.array([[0], [9]]), np.zeros(4, dtype=int), 2)


@pytest.mark.parametrize("method", METHODS)
def test_simulated_graph_plans_are_valid_for_every_method_and_p(event_graph, method: str):
    edge_index = event_graph.edge_index.numpy()
    for n_parts in range(1, 9):
        assignment = partition_graph(event_graph, n_parts, method)
        plans = build_halo_plans(edge_index, assignment, n_parts)
        validate_plans(plans, edge_index, assignment)
        owned_edges = sum(int(plan.edge_owned.sum()) for plan in plans)
        assert owned_edges == edge_index.shape[1]
