"""The Interaction Network's layers as an exported model computes them
(:mod:`partgnn.export.edge_classifier`), in operations TorchScript, AOTInductor and ONNX all
take: an edge MLP's first layer block by block (:class:`EdgeBlockMLP`), and the edge rows reduced
into nodes (:func:`aggregate`: by a scatter, or by prefix sums over the edges sorted by node,
whose layout :func:`sorted_layout` makes once a forward pass)."""

from __future__ import annotations

import torch
from torch import nn


class EdgeBlockMLP(nn.Module):
    """An MLP on ``[h_src, h_dst, e]`` with its first layer applied block by block.

    ``W [h_src, h_dst, e] + b = (h W_src)[src] + (h W_dst)[dst] + e W_e + b``: the node blocks
    are multiplied once per node and gathered per edge, as
    :func:`~partgnn.models.lean_mlp.first_layer` does in partgnn's model.

    Args:
        mlp: The trained MLP (its first module a ``Linear`` on ``2 * node_width + edge
            width`` inputs).
        node_width: Width of the node rows ``h``.

    Shapes:
        - nodes: ``(N, node_width)``; edges: ``(E, F_e)``; src, dst: ``(E,)``.
        - output: ``(E, out)``.
    """

    def __init__(self, mlp: nn.Sequential, node_width: int) -> None:
        super().__init__()
        first = mlp[0]
        weight = first.weight.detach()
        self.w_src = nn.Parameter(weight[:, :node_width].t().contiguous(), requires_grad=False)
        self.w_dst = nn.Parameter(
            weight[:, node_width : 2 * node_width].t().contiguous(), requires_grad=False
        )
        self.w_edge = nn.Parameter(
            weight[:, 2 * node_width :].t().contiguous(), requires_grad=False
        )
        bias = first.bias if first.bias is not None else torch.zeros(weight.shape[0])
        self.bias = nn.Parameter(bias.detach().clone(), requires_grad=False)
        self.tail = nn.Sequential(*list(mlp)[1:])

    def forward(
        self, nodes: torch.Tensor, edges: torch.Tensor, src: torch.Tensor, dst: torch.Tensor
    ) -> torch.Tensor:
        """The MLP of each edge's ``[nodes[src], nodes[dst], edges]``."""
        first = (nodes @ self.w_src)[src] + (nodes @ self.w_dst)[dst] + edges @ self.w_edge
        return self.tail(first + self.bias)


def no_layout(index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A layout :func:`aggregate` does not read (empty tensors: the sums by a scatter)."""
    empty = index[:0]
    return empty, empty, empty


def sorted_layout(
    index: torch.Tensor, n_nodes: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The edges sorted by ``index`` ``(E,)`` and where each node's run of them starts and ends
    in that order, ``(n_nodes,)`` each: what :func:`prefix_sums` needs, made once a forward."""
    order = torch.argsort(index)
    counts = torch.zeros(n_nodes, dtype=index.dtype, device=index.device).scatter_add(
        0, index, torch.ones_like(index)
    )
    ends = torch.cumsum(counts, 0)
    return order, ends - counts, ends


def prefix_sums(
    e: torch.Tensor, layout: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    """Each node's sum of its edges' rows of ``e`` ``(E, H)``, as differences of the prefix
    sums of the rows sorted by node, ``(n_nodes, H)``; the prefix sums in float64, so the
    differences lose nothing of float32 rows."""
    order, starts, ends = layout
    rows = e.index_select(0, order).to(torch.float64)
    prefix = torch.cat([rows.new_zeros(1, rows.shape[1]), torch.cumsum(rows, 0)])
    return (prefix.index_select(0, ends) - prefix.index_select(0, starts)).to(e.dtype)


def aggregate(
    e: torch.Tensor,
    index: torch.Tensor,
    n_nodes: int,
    how: str,
    layout: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    by_prefix: bool,
) -> torch.Tensor:
    """Edge latents ``(E, H)`` reduced into ``n_nodes`` rows by ``index`` (``sum``, ``mean``,
    ``max`` or ``sum`` and ``max`` side by side); nodes without edges get zeros, as in
    :func:`~partgnn.models.edge_aggregation.aggregate_both_ways`. The sums by a scatter, or
    (``by_prefix``) by :func:`prefix_sums` with the sorted ``layout`` (:func:`sorted_layout`)."""
    rows = index.unsqueeze(1).expand(-1, e.shape[1])
    if by_prefix:
        total = prefix_sums(e, layout)
    else:
        total = torch.zeros(n_nodes, e.shape[1], dtype=e.dtype, device=e.device).scatter_add(
            0, rows, e
        )
    if how == "sum":
        return total
    if how == "mean":
        count = torch.zeros(n_nodes, dtype=e.dtype, device=e.device).scatter_add(
            0, index, torch.ones_like(index, dtype=e.dtype)
        )
        return total / torch.clamp(count, min=1.0).unsqueeze(1)
    largest = torch.zeros(n_nodes, e.shape[1], dtype=e.dtype, device=e.device).scatter_reduce(
        0, rows, e, reduce="amax", include_self=False
    )
    if how == "max":
        return largest
    return torch.cat([total, largest], dim=1)
