"""Batch normalisation over the whole event graph, also when its ranks hold parts of it.

The reference pipeline's Interaction Network (acorn's InteractionGNN2) normalises every hidden
layer of its MLPs with BatchNorm over *the graph's* rows (all edges, or all nodes) and without
running statistics: a graph is normalised with its own statistics in training and scoring
alike. On a partitioned graph a rank holds only some rows, so :class:`GraphBatchNorm` takes the
mean and variance over the rows of every rank of the graph-parallel group (two all-reduces of
``H + 1`` and ``H`` numbers per normalisation forward, one of ``2 H`` backward): halo training
stays the full-graph computation. The backward pass keeps only the normalised rows and
``1 / sigma`` (:class:`_GraphBatchNorm`). An edge that crosses the cut is held by two ranks;
it is counted on the rank that owns its target node, so every edge of the event counts once.

Which rows count and over which group is the :class:`GroupStatistics` of the forward pass
(:func:`statistics` installs it); without one (a module used on its own) the statistics are the
rows'. Recomputed (activation recomputation), a region gets the statistics its forward pass
computed again without communicating (:meth:`GroupStatistics.region`), as the halo rows are
replayed (:mod:`partgnn.models.replayed_exchange`); the gradients' sums still cross the group.

Glossary: ``z`` rows ``(M, H)`` (one per edge or per owned node); ``count`` which of them count
``(M,)`` (``None``: all).
"""

from __future__ import annotations

import contextvars
from collections import deque
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Literal

import torch
import torch.distributed as dist
from torch import nn

#: Which rows a normalisation sees: one per edge, or one per (owned) node.
Rows = Literal["edges", "nodes"]

_CURRENT: contextvars.ContextVar[GroupStatistics | None] = contextvars.ContextVar(
    "partgnn_graph_statistics", default=None
)


class GroupStatistics:
    """How the normalisations of one forward pass reduce their rows: which edges count on this
    rank and the group whose ranks hold the rest of the graph.

    Args:
        edge_count: ``(E_local,)`` bool, the local edges this rank counts (``None``: all, a
            whole graph).
        group: The graph-parallel process group (``None`` with ``distributed=False``: no
            communication).
        distributed: Whether the rows are spread over the ranks of ``group`` (``None`` then
            means the default group).
    """

    def __init__(
        self,
        edge_count: torch.Tensor | None = None,
        group: dist.ProcessGroup | None = None,
        *,
        distributed: bool = False,
    ) -> None:
        self.edge_count = edge_count
        self.group = group
        self.distributed = distributed
        self._recording: deque[torch.Tensor] | None = None
        self._replaying: deque[torch.Tensor] | None = None

    def count(self, rows: Rows, z: torch.Tensor) -> torch.Tensor | None:
        """The rows of ``z`` that count (``None``: all)."""
        if rows == "nodes" or self.edge_count is None:
            return None
        if self.edge_count.shape[0] != z.shape[0]:
            raise ValueError(
                f"GraphBatchNorm: {z.shape[0]} edge rows, the graph has "
                f"{self.edge_count.shape[0]} local edges"
            )
        return self.edge_count

    def reduced(self, local: torch.Tensor) -> torch.Tensor:
        """``local`` summed over the group (in a recomputation: the sum the forward pass
        took, without communicating). Not differentiable: :class:`_GraphBatchNorm`'s backward
        reduces the gradients' sums itself."""
        if not self.distributed:
            return local
        if self._replaying is not None:
            if not self._replaying:
                raise RuntimeError("GraphBatchNorm: the recomputation normalises more than it did")
            return self._replaying.popleft()
        total = local.clone()
        dist.all_reduce(total, group=self.group)
        if self._recording is not None:
            self._recording.append(total)
        return total

    def reduce_gradients(self, local: torch.Tensor) -> torch.Tensor:
        """The gradients' sums ``local`` summed over the group (in place; the backward pass
        communicates also when its forward pass was replayed)."""
        if self.distributed:
            dist.all_reduce(local, group=self.group)
        return local

    def region(self) -> tuple[AbstractContextManager, AbstractContextManager]:
        """A recomputed region's contexts (``torch.utils.checkpoint``'s ``context_fn``): its
        forward pass records the group's sums, its recomputation replays them."""
        sums: deque[torch.Tensor] = deque()
        return self._within("_recording", sums), self._within("_replaying", sums)

    @contextmanager
    def _within(self, mode: str, sums: deque[torch.Tensor]) -> Iterator[None]:
        token = _CURRENT.set(self)
        setattr(self, mode, sums)
        try:
            yield
        finally:
            setattr(self, mode, None)
            _CURRENT.reset(token)


@contextmanager
def statistics(current: GroupStatistics | None) -> Iterator[None]:
    """Installs ``current`` for the :class:`GraphBatchNorm` modules run inside."""
    token = _CURRENT.set(current)
    try:
        yield
    finally:
        _CURRENT.reset(token)


class GraphBatchNorm(nn.Module):
    """BatchNorm of rows ``(M, H)`` with the statistics of the whole graph's rows, no running
    statistics (the same in training and scoring), an affine map per feature.

    Args:
        features: Width ``H``.
        rows: Whether the rows are edges or nodes (which rows count: see
            :class:`GroupStatistics`).
        eps: Added to the variance.

    Shapes:
        - z: ``(M, H)``; output the same.
    """

    def __init__(self, features: int, rows: Rows, eps: float = 1e-5) -> None:
        super().__init__()
        if rows not in ("edges", "nodes"):
            raise ValueError(f"GraphBatchNorm: rows must be 'edges' or 'nodes' (got {rows!r})")
        self.features, self.rows, self.eps = features, rows, eps
        self.weight = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))

    def extra_repr(self) -> str:
        return f"{self.features}, rows={self.rows}, eps={self.eps}"

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        if z.dtype in (torch.bfloat16, torch.float16):
            # Statistics of ~10^5 rows in float32 (bf16 autocast); the rows go on in bf16.
            return self._normalised(z.float()).to(z.dtype)
        return self._normalised(z)

    def _normalised(self, z: torch.Tensor) -> torch.Tensor:
        current = _CURRENT.get() or GroupStatistics()
        count = current.count(self.rows, z)
        weight, bias = self.weight.to(z.dtype), self.bias.to(z.dtype)
        return _GraphBatchNorm.apply(z, weight, bias, count, current, self.eps)


class _GraphBatchNorm(torch.autograd.Function):
    """``(z - mean) / sqrt(variance + eps) * weight + bias`` with the mean and variance of the
    counted rows of the whole group, keeping only the normalised rows ``x`` and ``1 / sigma``
    for the backward pass.

    With ``g`` the output's gradient, ``c_j`` whether row ``j`` counts and ``N`` the rows
    counted over the group, the input's gradient is
    ``dz_j = (g_j * w - c_j / N * (A + x_j * B)) / sigma`` where ``A = sum_k g_k * w`` and
    ``B = sum_k g_k * w * x_k`` run over every row of every rank (each row's output depends on
    the statistics): one all-reduce of ``2 H`` numbers per normalisation in the backward pass.
    """

    @staticmethod
    def forward(
        ctx, z: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
        count: torch.Tensor | None, current: GroupStatistics, eps: float,
    ) -> torch.Tensor:  # fmt: skip
        if count is None:
            counted, n = z, z.new_full((1,), float(z.shape[0]))
        else:
            mask = count.unsqueeze(-1).to(z.dtype)
            counted, n = z * mask, count.sum().to(z.dtype).reshape(1)
        first = current.reduced(torch.cat([counted.sum(0), n]))
        del counted
        # No rows anywhere: nothing to normalise (the sums are 0).
        n_total = first[-1].clamp(min=1)
        normalised = z - first[:-1] / n_total
        squares = normalised.square()
        if count is not None:
            squares.mul_(mask)
        variance = current.reduced(squares.sum(0)) / n_total
        del squares
        inverse_sigma = torch.rsqrt(variance + eps)
        normalised.mul_(inverse_sigma)
        ctx.save_for_backward(normalised, inverse_sigma, weight, count)
        ctx.n_total, ctx.current = n_total, current
        return torch.addcmul(bias, normalised, weight)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        normalised, inverse_sigma, weight, count = ctx.saved_tensors
        grad_bias = grad.sum(0)
        grad_weight = (grad * normalised).sum(0)
        sums = ctx.current.reduce_gradients(torch.cat([grad_bias * weight, grad_weight * weight]))
        a, b = sums.chunk(2)
        shift = torch.addcmul(a, normalised, b)  # A + x_j * B
        if count is not None:
            shift.mul_(count.unsqueeze(-1).to(shift.dtype))
        grad_z = (grad * weight).sub_(shift.div_(ctx.n_total)).mul_(inverse_sigma)
        return grad_z, grad_weight, grad_bias, None, None, None
