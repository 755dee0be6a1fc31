"""Edge confusion counts at a score cut, and score histograms for choosing the cut.

Counts (true/false positives and negatives) add up across events and ranks, so a partitioned
run sums each rank's counts over the edges it owns (each global edge counted once) and reduces
them with one all-reduce. Edges a naive sector cannot score (they cross its boundary) count as
predicted false: a lost edge is a missed true edge. Training's validation and evaluation both
count with this module (torch only); :mod:`partgnn.metrics.edge_metrics` adds what only
evaluation needs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
import torch.distributed as dist

from partgnn.json_files import NAN

#: Default score cut on the edge classifier's sigmoid output.
SCORE_CUT = 0.5


#: Bins of [0, 1] in :func:`score_histograms`: candidate cuts are multiples of 1 / SCORE_BINS.
SCORE_BINS = 200


@dataclass(frozen=True)
class EdgeRates:
    """Efficiency and purity of counted edges, overall and split by the partition (NaN:
    undefined, e.g. no boundary edges, or not recorded).

    Attributes:
        efficiency, purity: Of all counted edges.
        boundary_efficiency, boundary_purity: Of the edges the partition cuts.
        interior_efficiency, interior_purity: Of the other edges.
        boundary_true_edges: True edges the partition cuts.
    """

    efficiency: float = NAN
    purity: float = NAN
    boundary_efficiency: float = NAN
    boundary_purity: float = NAN
    interior_efficiency: float = NAN
    interior_purity: float = NAN
    boundary_true_edges: float = NAN


@dataclass
class EdgeCounts:
    """Confusion counts of edges: all edges and the boundary subset (interior = all - boundary).

    Attributes:
        tp, fp, fn, tn: Over all counted edges.
        boundary_tp, boundary_fp, boundary_fn, boundary_tn: Over edges that cross the partition
            boundary.
    """

    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0
    boundary_tp: int = 0
    boundary_fp: int = 0
    boundary_fn: int = 0
    boundary_tn: int = 0

    def __add__(self, other: EdgeCounts) -> EdgeCounts:
        return EdgeCounts(*(a + b for a, b in zip(self.as_tuple(), other.as_tuple(), strict=True)))

    def as_tuple(self) -> tuple[int, ...]:
        return tuple(getattr(self, f.name) for f in fields(self))

    def all_reduce(self, group: dist.ProcessGroup | None, device: torch.device) -> EdgeCounts:
        """Sums the counts over the ranks of ``group`` (a collective: every rank calls it)."""
        tensor = torch.tensor(self.as_tuple(), dtype=torch.int64, device=device)
        dist.all_reduce(tensor, group=group)
        return EdgeCounts(*(int(v) for v in tensor.tolist()))

    @property
    def efficiency(self) -> float:
        return ratio(self.tp, self.tp + self.fn)

    @property
    def purity(self) -> float:
        return ratio(self.tp, self.tp + self.fp)

    @property
    def boundary_efficiency(self) -> float:
        return ratio(self.boundary_tp, self.boundary_tp + self.boundary_fn)

    @property
    def boundary_purity(self) -> float:
        return ratio(self.boundary_tp, self.boundary_tp + self.boundary_fp)

    @property
    def interior_efficiency(self) -> float:
        tp, fn = self.tp - self.boundary_tp, self.fn - self.boundary_fn
        return ratio(tp, tp + fn)

    @property
    def interior_purity(self) -> float:
        tp, fp = self.tp - self.boundary_tp, self.fp - self.boundary_fp
        return ratio(tp, tp + fp)

    def summary(self) -> EdgeRates:
        """Efficiency and purity overall, on boundary and on interior edges."""
        return EdgeRates(
            efficiency=self.efficiency,
            purity=self.purity,
            boundary_efficiency=self.boundary_efficiency,
            boundary_purity=self.boundary_purity,
            interior_efficiency=self.interior_efficiency,
            interior_purity=self.interior_purity,
            boundary_true_edges=float(self.boundary_tp + self.boundary_fn),
        )


def count_edges(
    scores: torch.Tensor,
    y: torch.Tensor,
    boundary: torch.Tensor,
    *,
    cut: float = SCORE_CUT,
    lost_y: torch.Tensor | None = None,
) -> EdgeCounts:
    """Counts predictions of the edges one rank is responsible for.

    Args:
        scores: Edge scores in [0, 1], shape ``(E,)``.
        y: Edge truth (0 or 1), shape ``(E,)``.
        boundary: Mask of edges crossing the partition boundary, shape ``(E,)``.
        cut: Score cut: an edge is predicted true when ``score > cut``.
        lost_y: Truth of the boundary edges this rank is responsible for but could not score
            (naive sectors), shape ``(L,)``; they count as predicted false.

    Returns:
        The counts.
    """
    predicted = scores > cut
    true = y > 0.5
    boundary = boundary.bool()

    def confusion(mask: torch.Tensor) -> tuple[int, int, int, int]:
        p, t = predicted[mask], true[mask]
        return (
            int((p & t).sum()),
            int((p & ~t).sum()),
            int((~p & t).sum()),
            int((~p & ~t).sum()),
        )

    everything = torch.ones_like(boundary)
    counts = EdgeCounts(*confusion(everything), *confusion(boundary))
    if lost_y is not None and lost_y.numel():
        lost_true = int((lost_y > 0.5).sum())
        lost_false = int(lost_y.numel()) - lost_true
        counts = counts + EdgeCounts(
            fn=lost_true, tn=lost_false, boundary_fn=lost_true, boundary_tn=lost_false
        )
    return counts


def ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator``, NaN when the denominator is 0."""
    return numerator / denominator if denominator else float("nan")


def score_histograms(
    scores: torch.Tensor, y: torch.Tensor, *, lost_y: torch.Tensor | None = None
) -> torch.Tensor:
    """Histograms of the scores of true and of false edges, for choosing a cut.

    They add up over events and ranks (one all-reduce), like :class:`EdgeCounts`.

    Args:
        scores: Edge scores in [0, 1], shape ``(E,)``.
        y: Edge truth, shape ``(E,)``.
        lost_y: Truth of edges that could not be scored (naive sectors), shape ``(L,)``; they
            go to the lowest bin (below every cut).

    Returns:
        Counts ``(2, SCORE_BINS)`` int64: row 0 true edges, row 1 false edges; bin ``k`` holds
        scores in ``[k / SCORE_BINS, (k + 1) / SCORE_BINS)`` (1.0 in the last bin).
    """
    true = y > 0.5
    bins = (scores.detach().to(torch.float64) * SCORE_BINS).long().clamp(0, SCORE_BINS - 1)
    histograms = torch.zeros(2, SCORE_BINS, dtype=torch.int64, device=scores.device)
    histograms[0].index_add_(0, bins[true], torch.ones_like(bins[true]))
    histograms[1].index_add_(0, bins[~true], torch.ones_like(bins[~true]))
    if lost_y is not None and lost_y.numel():
        lost_true = int((lost_y > 0.5).sum())
        histograms[0, 0] += lost_true
        histograms[1, 0] += int(lost_y.numel()) - lost_true
    return histograms


def best_score_cut(histograms: torch.Tensor, beta: float = 1.0) -> dict[str, float]:
    """The cut that maximises the edge F-beta score of efficiency and purity.

    ``F_beta = (1 + beta^2) * TP / ((1 + beta^2) * TP + beta^2 * FN + FP)``: ``beta = 1`` is the
    F1 score (harmonic mean); ``beta < 1`` weighs purity more, which suits track building by
    connected components (a false edge merges two tracks, a missing edge only splits one).

    Args:
        histograms: ``(2, SCORE_BINS)`` from :func:`score_histograms`, summed over events.
        beta: Weight of efficiency relative to purity, > 0.

    Returns:
        ``cut`` (a multiple of ``1 / SCORE_BINS``: edges in the bins at or above it are
        accepted) and the ``efficiency``, ``purity`` and ``fscore`` there; NaN without true
        edges.
    """
    counts = histograms.to(torch.float64).cpu()
    # Accepted at cut k / SCORE_BINS: bins k .. SCORE_BINS - 1 (suffix sums), k = 1 .. bins - 1.
    tp = counts[0].flip(0).cumsum(0).flip(0)[1:]
    fp = counts[1].flip(0).cumsum(0).flip(0)[1:]
    n_true = counts[0].sum()
    if n_true == 0:
        nan = float("nan")
        return {"cut": SCORE_CUT, "efficiency": nan, "purity": nan, "fscore": nan}
    b2 = beta * beta
    fscore = (1 + b2) * tp / ((1 + b2) * tp + b2 * (n_true - tp) + fp)
    best = int(torch.argmax(fscore))
    return {
        "cut": (best + 1) / SCORE_BINS,
        "efficiency": float(tp[best] / n_true),
        "purity": ratio(float(tp[best]), float(tp[best] + fp[best])),
        "fscore": float(fscore[best]),
    }
