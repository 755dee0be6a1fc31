"""The loss every mode trains with, its normaliser, and the arithmetic precision of a run.

Weighted binary cross-entropy summed over the edges a rank counts and divided by a normaliser.
Edge weights (:class:`EdgeWeights`, the ``loss`` section of a run config):

- by default every true edge weighs ``pos_weight`` and every false edge 1;
- with ``target_pt`` (the field's convention for full event graphs), the true edges of
  *target* particles (``edge_pt > target_pt``) weigh ``pos_weight``, the true edges of other
  particles weigh ``nontarget_weight`` (0: they are left out of the loss, neither pushed up
  nor down), and false edges 1. A true edge of a non-target particle is still a positive
  (label 1) where it counts.

The normaliser of an event is its *weighted edge count*, the sum of its edges' weights
(:meth:`EdgeWeights.normaliser`); with the event's global count the losses of the ranks of one
event add up to the full-graph loss (halo mode), and the Python API's
:func:`partgnn.api.owned_edge_loss` divides by the same count.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

#: ``run.dtype`` -> parameter and activation dtype.
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float64": torch.float64}


@dataclass(frozen=True)
class EdgeCountsByKind:
    """How many edges of an event (or of a rank's part) are of each kind.

    Attributes:
        edges: All edges.
        true: True edges (target or not).
        nontarget: True edges of non-target particles (0 without a ``target_pt``).
    """

    edges: int
    true: int
    nontarget: int = 0

    def __add__(self, other: EdgeCountsByKind) -> EdgeCountsByKind:
        return EdgeCountsByKind(
            self.edges + other.edges, self.true + other.true, self.nontarget + other.nontarget
        )


@dataclass(frozen=True)
class EdgeWeights:
    """The loss weight of each kind of edge (``loss.pos_weight``, ``loss.target_pt``,
    ``loss.nontarget_weight``).

    Attributes:
        pos_weight: Weight of a (target) true edge; false edges weigh 1.
        target_pt: ``None``: every true edge is a target. Else true edges with
            ``edge_pt <= target_pt`` [GeV] are non-target and weigh ``nontarget_weight``.
        nontarget_weight: Weight of a true edge of a non-target particle.
    """

    pos_weight: float = 1.0
    target_pt: float | None = None
    nontarget_weight: float = 0.0

    @property
    def by_pt(self) -> bool:
        """Whether the weights depend on the edges' particle pT (``edge_pt``)."""
        return self.target_pt is not None

    def counts(
        self, y: torch.Tensor | np.ndarray, edge_pt: torch.Tensor | np.ndarray | None
    ) -> EdgeCountsByKind:
        """The kinds of the edges ``y`` ``(E,)`` with particle pT ``edge_pt`` ``(E,)`` (only
        read with a ``target_pt``)."""
        y = torch.as_tensor(y)
        true = y > 0.5
        nontarget = 0
        if self.target_pt is not None:
            if edge_pt is None:
                raise ValueError("loss.target_pt needs the edges' particle pT (edge_pt)")
            nontarget = int((true & ~(torch.as_tensor(edge_pt) > self.target_pt)).sum())
        return EdgeCountsByKind(int(y.shape[0]), int(true.sum()), nontarget)

    def normaliser(self, counts: EdgeCountsByKind) -> float:
        """The sum of the weights of ``counts``' edges (at least 1, so an event without edges
        divides by 1)."""
        total = counts.edges + (self.pos_weight - 1.0) * counts.true
        if counts.nontarget:
            total += (self.nontarget_weight - self.pos_weight) * counts.nontarget
        return max(total, 1.0)

    def per_edge(self, y: torch.Tensor, edge_pt: torch.Tensor | None) -> torch.Tensor | None:
        """Each edge's weight ``(E,)`` in ``y``'s dtype, or ``None`` where the weights are
        ``pos_weight`` for true and 1 for false edges (:func:`edge_loss` computes those)."""
        if self.target_pt is None:
            return None
        if edge_pt is None:
            raise ValueError("loss.target_pt needs the edges' particle pT (edge_pt)")
        true = y > 0.5
        target = true & (edge_pt.to(y.device) > self.target_pt)
        weight = torch.ones_like(y)
        weight[true] = self.nontarget_weight
        weight[target] = self.pos_weight
        return weight


def edge_loss(
    logits: torch.Tensor,
    y: torch.Tensor,
    pos_weight: float,
    normaliser: float,
    weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """Weighted BCE summed over edges and divided by ``normaliser``.

    Args:
        logits: Edge logits ``(E,)``.
        y: Edge truth ``(E,)`` (0 or 1, in the logits' dtype).
        pos_weight: Weight of true edges (false edges weigh 1), where ``weight`` is not given.
        normaliser: The denominator (an event's :meth:`EdgeWeights.normaliser`).
        weight: Each edge's weight ``(E,)`` (:meth:`EdgeWeights.per_edge`), or ``None``.

    Returns:
        A scalar.
    """
    if weight is None:
        weight = default_edge_weight(y, pos_weight)
    total = F.binary_cross_entropy_with_logits(
        logits, y, weight=weight.to(logits.dtype), reduction="sum"
    )
    return total / normaliser


def default_edge_weight(y: torch.Tensor, pos_weight: float) -> torch.Tensor:
    """Each edge's weight where none is given ``(E,)``: ``pos_weight`` for a true edge, 1 for a
    false one, in ``y``'s dtype."""
    return 1.0 + (pos_weight - 1.0) * y


def weighted_count(n_edges: int, n_true: int, pos_weight: float) -> float:
    """``sum(1 + (pos_weight - 1) * y)`` over ``n_edges`` edges of which ``n_true`` are true
    (at least 1, so an event without edges divides by 1)."""
    return EdgeWeights(pos_weight).normaliser(EdgeCountsByKind(n_edges, n_true))


def autocast(
    device: torch.device, bf16: bool, *, cache: bool = True
) -> AbstractContextManager[object]:
    """bf16 autocast on ``device`` for a forward pass when ``bf16`` (``run.bf16``), else
    nothing (``cache``: keep the weights' casts for the pass; off inside a CUDA graph capture)."""
    if not bf16:
        return nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=cache)
