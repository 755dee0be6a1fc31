"""The node-sums kernel against index_add_, and where the model uses it."""

from __future__ import annotations

import pytest
import torch

from partgnn.models.edge_aggregation import aggregate_both_ways
from partgnn.models.lean_mlp import EdgeMLP
from partgnn.models.node_sums import Incidence, NodeEdges, kernel_applies, sums_by_node


def _edges(n_nodes: int, n_edges: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(0, n_nodes, (n_edges,), generator=generator)
    dst = torch.randint(0, n_nodes, (n_edges,), generator=generator)
    return src, dst


def _reference(rows: torch.Tensor, index: torch.Tensor, n_nodes: int) -> torch.Tensor:
    return rows.new_zeros((n_nodes, rows.shape[1])).index_add_(0, index, rows)


@pytest.mark.parametrize("width", [1, 20, 64, 300])
@pytest.mark.parametrize("sorted_by_src", [False, True])
def test_float64_sums_equal_index_add_bitwise(width, sorted_by_src):
    """A node's edges are added in their order, as index_add_ adds them; 300 columns take
    several column blocks; node 0 and the last nodes have no edges."""
    src, dst = _edges(40, 500)
    src, dst = src.clamp(1, 36), dst.clamp(1, 36)
    if sorted_by_src:
        order = torch.argsort(src, stable=True)
        src, dst = src[order], dst[order]
    rows = torch.randn(500, width, dtype=torch.float64)
    incidence = Incidence.of(src, dst, 40)
    assert (incidence.by_src.order is None) == sorted_by_src
    incoming, outgoing = sums_by_node(rows, incidence)
    assert torch.equal(incoming, _reference(rows, dst, 40))
    assert torch.equal(outgoing, _reference(rows, src, 40))
    assert incoming[0].abs().sum() == 0 and incoming[37:].abs().sum() == 0


def test_no_edges_give_zero_sums():
    empty = torch.zeros(0, dtype=torch.long)
    incoming, outgoing = sums_by_node(torch.zeros(0, 8), Incidence.of(empty, empty, 3))
    assert incoming.shape == outgoing.shape == (3, 8)
    assert incoming.abs().sum() == 0 and outgoing.abs().sum() == 0


def test_bf16_rows_are_summed_in_float32_and_rounded_once():
    """A 4096-edge star: summed in bf16 edge by edge, the small terms are lost (the partial sum
    stops growing); the kernel's sum is the exact sum rounded to bf16 once."""
    n_edges = 4096
    rows = (torch.rand(n_edges, 64, generator=torch.Generator().manual_seed(1)) + 0.5).bfloat16()
    src = torch.arange(n_edges) % 7
    dst = torch.zeros(n_edges, dtype=torch.long)
    incoming, _ = sums_by_node(rows, Incidence.of(src, dst, 7))
    exact = rows.double().sum(0)
    assert incoming.dtype == torch.bfloat16
    assert ((incoming[0].double() - exact).abs() / exact).max() <= 2.0**-8
    in_bf16 = torch.zeros(64, dtype=torch.bfloat16)
    for row in rows:
        in_bf16 += row
    assert ((in_bf16.double() - exact).abs() / exact).max() > 0.1


def test_sums_do_not_depend_on_the_thread_count():
    src, dst = _edges(2000, 40000, seed=2)
    rows = torch.randn(40000, 64).bfloat16()
    incidence = Incidence.of(src, dst, 2000)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = sums_by_node(rows, incidence)
        torch.set_num_threads(2)
        two = sums_by_node(rows, incidence)
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(a, b) for a, b in zip(one, two, strict=True))


def test_bad_indices_and_offsets_are_refused():
    with pytest.raises(ValueError, match="node index 5 out of range for 3 nodes"):
        NodeEdges.of(torch.tensor([0, 5]), 3)
    incidence = Incidence.of(torch.tensor([0, 1]), torch.tensor([1, 0]), 2)
    with pytest.raises(RuntimeError, match="run from 0 to the 3 rows"):
        sums_by_node(torch.zeros(3, 4), incidence)
    assert not kernel_applies(torch.zeros(3, 4, dtype=torch.float16))
    assert not kernel_applies(torch.zeros(3))


@pytest.mark.parametrize("aggregation", ["sum", "mean", "sum_max"])
def test_aggregation_with_the_kernel_equals_index_add_in_float64(aggregation):
    src, dst = _edges(50, 400, seed=3)
    e = torch.randn(400, 16, dtype=torch.float64, requires_grad=True)
    results = []
    for incidence in (None, Incidence.of(src, dst, 50)):
        sums = aggregate_both_ways(e, src, dst, 50, aggregation, incidence)
        weights = torch.randn(2, 50, sums[0].shape[1], generator=torch.Generator().manual_seed(4),
                              dtype=torch.float64)  # fmt: skip
        (grad,) = torch.autograd.grad((sums[0] * weights[0] + sums[1] * weights[1]).sum(), [e])
        results.append((*sums, grad))
    for plain, kernel in zip(*results, strict=True):
        assert torch.equal(plain, kernel)


def test_gather_gradient_by_node_equals_autograds():
    """EdgeMLP.gather with the edges listed by node: the projections' gradient is the same
    sums as index_select's backward (index_add_ into both halves)."""
    src, dst = _edges(60, 700, seed=5)
    projections = torch.randn(60, 32, dtype=torch.float64, requires_grad=True)
    grad_terms = torch.randn(700, 16, dtype=torch.float64)
    grads = []
    for incidence in (None, Incidence.of(src, dst, 60)):
        terms = EdgeMLP.gather(projections, src, dst, incidence)
        grads.append(torch.autograd.grad(terms, [projections], grad_terms)[0])
    assert torch.equal(*grads)
