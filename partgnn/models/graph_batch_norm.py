"""Batch normalisation over the whole event graph, also when its ranks hold parts of it.

The reference pipeline's Interaction Network (acorn's InteractionGNN2) normalises every hidden
layer of its MLPs with BatchNorm over *the graph's* rows (all edges, or all nodes) and without
running statistics: a graph is normalised with its own statistics in training and scoring
alike. On a partitioned graph a rank holds only some rows, so :class:`GraphBatchNorm` takes the
mean and variance over the rows of every rank of the graph-parallel group (two all-reduces of
``H + 1`` numbers per normalisation, differentiable): halo training stays the full-graph
computation. An edge that crosses the cut is held by two ranks; it is counted on the rank that
owns its target node, so every edge of the event counts once.

Which rows count and over which group is the :class:`GroupStatistics` of the forward pass
(:func:`statistics` installs it); without one (a module used on its own) the statistics are the
rows'. Recomputed (activation checkpointing), a region gets the statistics its forward pass
computed again without communicating (:meth:`GroupStatistics.region`), as the halo rows are
replayed (:mod:`partgnn.models.replayed_exchange`); the gradients still cross the group.

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

    def summed(self, local: torch.Tensor) -> torch.Tensor:
        """``local`` summed over the group (differentiable; replayed in a recomputation)."""
        if not self.distributed:
            return local
        if self._replaying is not None:
            if not self._replaying:
                raise RuntimeError("GraphBatchNorm: the recomputation normalises more than it did")
            return _ReplayedSum.apply(local, self._replaying.popleft(), self)
        total = _GroupSum.apply(local, self)
        if self._recording is not None:
            self._recording.append(total.detach())
        return total

    def region(self) -> tuple[AbstractContextManager, AbstractContextManager]:
        """A checkpointed region's contexts (``torch.utils.checkpoint``'s ``context_fn``): its
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
        counted = z if count is None else z * count.unsqueeze(-1).to(z.dtype)
        if count is None:
            n = z.new_full((1,), float(z.shape[0]))
        else:
            n = count.sum().to(z.dtype).reshape(1)
        first = current.summed(torch.cat([counted.sum(0), n]))
        # No rows anywhere: nothing to normalise (the sums are 0).
        n_total = first[-1].detach().clamp(min=1)
        mean = first[:-1] / n_total
        centred = z - mean
        squares = centred.square()
        if count is not None:
            squares = squares * count.unsqueeze(-1).to(z.dtype)
        variance = current.summed(squares.sum(0)) / n_total
        scale = torch.rsqrt(variance + self.eps) * self.weight.to(z.dtype)
        return centred * scale + self.bias.to(z.dtype)


class _GroupSum(torch.autograd.Function):
    """``sum over the group's ranks of local``; the gradient of every rank's share is the sum
    of the ranks' output gradients."""

    @staticmethod
    def forward(ctx, local: torch.Tensor, current: GroupStatistics) -> torch.Tensor:
        ctx.group = current.group
        total = local.detach().clone()
        dist.all_reduce(total, group=current.group)
        return total

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReplayedSum(torch.autograd.Function):
    """The group's sum recorded by the forward pass, returned in a recomputation without
    communicating; the backward pass is :class:`_GroupSum`'s."""

    @staticmethod
    def forward(
        ctx, local: torch.Tensor, recorded: torch.Tensor, current: GroupStatistics
    ) -> torch.Tensor:
        ctx.group = current.group
        return recorded.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None, None
