"""Edge reductions equal PyG's scatter, gradients included."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.utils import scatter

from partgnn.models import chunk_size
from partgnn.models.edge_aggregation import AGGREGATIONS, aggregate_both_ways

N_NODES, N_EDGES, H = 30, 500, 6


def _reference(e, src, dst, n_nodes, aggregation):
    def reduce(index):
        if aggregation == "sum_max":
            return torch.cat(
                [scatter(e, index, 0, dim_size=n_nodes, reduce=r) for r in ("sum", "max")], -1
            )
        return scatter(e, index, 0, dim_size=n_nodes, reduce=aggregation)

    return reduce(dst), reduce(src)


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_aggregate_both_ways_equals_pyg_scatter(monkeypatch, aggregation):
    monkeypatch.setattr(chunk_size, "MIN_CHUNK_EDGES", 32)  # several chunks
    generator = torch.Generator().manual_seed(5)
    e = torch.randn(N_EDGES, H, dtype=torch.float64, generator=generator, requires_grad=True)
    # Nodes 0..4 have no edges: zeros (and a mean of zero).
    src = torch.randint(5, N_NODES, (N_EDGES,), generator=generator)
    dst = torch.randint(5, N_NODES, (N_EDGES,), generator=generator)
    weights = [torch.randn(N_NODES, H * (2 if aggregation == "sum_max" else 1),
                           dtype=torch.float64, generator=generator) for _ in range(2)]  # fmt: skip

    def loss(pair):
        return sum((part * w).sum() for part, w in zip(pair, weights, strict=True))

    expected = _reference(e, src, dst, N_NODES, aggregation)
    (expected_grad,) = torch.autograd.grad(loss(expected), e)
    got = aggregate_both_ways(e, src, dst, N_NODES, aggregation)
    (grad,) = torch.autograd.grad(loss(got), e)
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-13)
        assert not a[:5].any()
    torch.testing.assert_close(grad, expected_grad, rtol=1e-13, atol=1e-13)


def test_one_direction_used():
    """A gradient for only the incoming (or outgoing) sums."""
    e = torch.randn(N_EDGES, H, dtype=torch.float64, requires_grad=True)
    src, dst = torch.randint(0, N_NODES, (2, N_EDGES))
    for used, index in ((0, dst), (1, src)):
        pair = aggregate_both_ways(e, src, dst, N_NODES)
        (grad,) = torch.autograd.grad(pair[used].sum(), e)
        (expected,) = torch.autograd.grad(scatter(e, index, 0, dim_size=N_NODES).sum(), e)
        torch.testing.assert_close(grad, expected, rtol=0, atol=0)


def test_half_precision_latents_are_summed_in_float32():
    """bf16 sums are accumulated in float32 (GPU atomics would round every addition in bf16)
    and returned in bf16."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class IndexAddDtypes(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.dtypes = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func._overloadpacket is torch.ops.aten.index_add_:
                self.dtypes.append(args[0].dtype)
            return func(*args, **(kwargs or {}))

    index = torch.zeros(4096, dtype=torch.long)
    e = torch.rand(4096, 8)
    exact = aggregate_both_ways(e.double(), index, index, 1)[0]
    with IndexAddDtypes() as spy:
        incoming, outgoing = aggregate_both_ways(e.bfloat16(), index, index, 1)
    assert spy.dtypes and set(spy.dtypes) == {torch.float32}
    assert incoming.dtype == outgoing.dtype == torch.bfloat16
    assert float((incoming.double() - exact).norm() / exact.norm()) < 2**-8
