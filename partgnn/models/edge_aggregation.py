"""Reduce edge latents at their target and source nodes, lean in the backward pass.

The sum's backward is a gather per direction, ``grad_e = grad_in[dst] + grad_out[src]``; done by
autograd it allocates both gathers and their sum (three ``E x H`` tensors at once). Here both
sums run in one function whose backward writes one ``E x H`` gradient, the sum of each edge's
two rows, in one ``embedding_bag`` kernel (no second gather). Half-precision latents (bf16
autocast) are summed in float32, chunk by chunk (a node with many edges would lose their small
terms in bf16's 8-bit mantissa), and the sums returned in the latents' dtype. Mean divides the
sums by the degrees; max (and the max half of ``sum_max``) is PyG's scatter. Given the edges
listed by node (:class:`~partgnn.models.node_sums.Incidence`, ``model.fused``), the sums are
the C++ kernel's on CPUs (:func:`~partgnn.models.node_sums.sums_by_node`: node by node, bf16 in
float32, both directions in one call) and ``embedding_bag``'s elsewhere
(:func:`~partgnn.models.node_sums.bag_sums`: one bag per node, no float32 copy of bf16 rows, no
atomic adds).
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch.nn import functional
from torch_geometric.utils import scatter

from partgnn.models.chunk_size import chunk_edges
from partgnn.models.node_sums import Incidence, bag_sums, sums_by_node

Aggregation = Literal["sum", "mean", "max", "sum_max"]
AGGREGATIONS: tuple[str, ...] = get_args(Aggregation)


def aggregate_both_ways(
    e: torch.Tensor,
    src: torch.Tensor,
    dst: torch.Tensor,
    n_nodes: int,
    aggregation: Aggregation = "sum",
    incidence: Incidence | None = None,
    *,
    chunk_bytes: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reductions of the edge latents into each node: over its incoming and outgoing edges.

    Args:
        e: Edge latents ``(E, H)``.
        src: Source node of each edge ``(E,)``.
        dst: Target node of each edge ``(E,)``.
        n_nodes: Rows of the result (nodes without edges get zeros).
        aggregation: ``sum``, ``mean``, ``max`` or ``sum_max`` (sum and max side by side).
        incidence: The edges listed by node (of ``n_nodes`` nodes): the sums are then the
            C++ kernel's where it applies, else ``embedding_bag``'s
            (:func:`~partgnn.models.node_sums.bag_sums`).
        chunk_bytes: The memory a chunk of edges may take (``model.chunk_mb``; ``None``: the
            device's default, :func:`~partgnn.models.chunk_size.chunk_edges`): the chunks of
            the half-precision sums.

    Returns:
        ``(incoming, outgoing)``, each ``(n_nodes, H)`` (``(n_nodes, 2 H)`` for ``sum_max``).
    """
    if aggregation == "max":
        return _max(e, dst, n_nodes), _max(e, src, n_nodes)
    if incidence is not None and incidence.n_nodes != n_nodes:
        incidence = None
    incoming, outgoing = _EdgeSums.apply(e, src, dst, n_nodes, incidence, chunk_bytes)
    if aggregation == "mean":
        return incoming / _degree(dst, n_nodes, e), outgoing / _degree(src, n_nodes, e)
    if aggregation == "sum_max":
        incoming = torch.cat([incoming, _max(e, dst, n_nodes)], dim=-1)
        outgoing = torch.cat([outgoing, _max(e, src, n_nodes)], dim=-1)
    return incoming, outgoing


def _max(e: torch.Tensor, index: torch.Tensor, n_nodes: int) -> torch.Tensor:
    return scatter(e, index, dim=0, dim_size=n_nodes, reduce="max")


def _degree(index: torch.Tensor, n_nodes: int, like: torch.Tensor) -> torch.Tensor:
    """Edges per node, at least 1 (an edgeless node's mean is 0, as PyG's), ``(n_nodes, 1)``."""
    count = torch.bincount(index, minlength=n_nodes)[:n_nodes].clamp_(min=1)
    return count.to(like.dtype).unsqueeze(-1)


class _EdgeSums(torch.autograd.Function):
    @staticmethod
    def forward(ctx, e, src, dst, n_nodes, incidence, chunk_bytes):
        ctx.save_for_backward(src, dst)
        if incidence is not None:
            if incidence.serves(e, n_nodes):
                return sums_by_node(e, incidence)
            return bag_sums(e, incidence)
        if e.dtype not in (torch.bfloat16, torch.float16):
            incoming = e.new_zeros((n_nodes, *e.shape[1:])).index_add_(0, dst, e)
            outgoing = e.new_zeros((n_nodes, *e.shape[1:])).index_add_(0, src, e)
            return incoming, outgoing
        incoming = e.new_zeros((n_nodes, *e.shape[1:]), dtype=torch.float32)
        outgoing = torch.zeros_like(incoming)
        size = _chunk_rows(e, chunk_bytes)
        for start in range(0, e.shape[0], size):
            rows = e[start : start + size].float()
            incoming.index_add_(0, dst[start : start + size], rows)
            outgoing.index_add_(0, src[start : start + size], rows)
        return incoming.to(e.dtype), outgoing.to(e.dtype)

    @staticmethod
    def backward(ctx, grad_incoming, grad_outgoing):
        src, dst = ctx.saved_tensors
        if grad_incoming is None and grad_outgoing is None:
            return None, None, None, None, None, None
        if grad_incoming is None:
            return grad_outgoing.index_select(0, src), None, None, None, None, None
        if grad_outgoing is None:
            return grad_incoming.index_select(0, dst), None, None, None, None, None
        return _gather_both(grad_incoming, grad_outgoing, src, dst), None, None, None, None, None


def _gather_both(
    grad_incoming: torch.Tensor, grad_outgoing: torch.Tensor, src: torch.Tensor, dst: torch.Tensor
) -> torch.Tensor:
    """``grad_incoming[dst] + grad_outgoing[src]`` ``(E, H)`` without a second ``E x H`` gather:
    one ``embedding_bag`` sum over bags of two rows of the stacked node gradients ``(2 N, H)``
    (one kernel; the bags' indices take 16 bytes per edge while it runs)."""
    n_nodes = grad_incoming.shape[0]
    table = torch.cat([grad_incoming, grad_outgoing.to(grad_incoming.dtype)])
    bags = torch.stack([dst, src + n_nodes], dim=1)
    return functional.embedding_bag(bags, table, mode="sum")


def _chunk_rows(e: torch.Tensor, chunk_bytes: int | None) -> int:
    """Rows of ``e`` ``(E, H)`` per chunk of the half-precision sums: an edge MLP's chunk
    (:func:`~partgnn.models.chunk_size.chunk_edges` at the latents' width in float32, which
    holds more per edge), one chunk where it fits."""
    return chunk_edges(e.shape[0], e.shape[-1], 4, chunk_bytes, e.device)
