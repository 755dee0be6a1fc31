"""Edge efficiency, purity and ROC AUC of a scores file's edges, overall and on subsets.

Evaluation only (numpy and scipy); the counting it shares with training's validation is in
:mod:`partgnn.metrics.edge_counts`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy.stats import rankdata

from partgnn import json_files
from partgnn.metrics.edge_counts import SCORE_CUT, EdgeRates, count_edges, ratio

NAN = json_files.NAN


@dataclass(frozen=True)
class EdgeMetrics(EdgeRates):
    """Edge figures of scored events (the ``edge`` section of an evaluation): the rates of
    :class:`~partgnn.metrics.edge_counts.EdgeRates` at the score cut (boundary ones NaN without
    a partition) and the figures below.

    Rates are the mean over events (NaN where no event defines them), counts the sum, and
    ``auc`` is computed over all edges together. NaN: undefined or not recorded.

    Attributes:
        auc: Area under the ROC curve (:func:`roc_auc`).
        target_efficiency: Target edges (true edges of target particles) scored above the cut,
            as a fraction of those the graphs hold.
        masked_purity: acorn's: selected target edges over selected target plus selected
            false edges (true edges of other particles left out).
        n_target_edges, n_target_selected: Target edges, and those above the cut.
        n_edges, n_true_edges: Edges scored, and the true ones among them.
    """

    auc: float = NAN
    target_efficiency: float = NAN
    masked_purity: float = NAN
    n_target_edges: float = NAN
    n_target_selected: float = NAN
    n_edges: float = NAN
    n_true_edges: float = NAN

    @classmethod
    def of_json(cls, content: dict[str, Any], where: str) -> EdgeMetrics:
        """The figures of an evaluation's ``edge`` object (what it lacks: NaN; older files lack
        the target and count fields).

        Raises:
            InputError: A figure that is not a number (one line naming ``where`` and it).
        """
        names = [f.name for f in dataclasses.fields(cls)]
        return cls(**json_files.numbers(content, names, where))


def roc_auc(scores: np.ndarray, y: np.ndarray) -> float:
    """Area under the ROC curve: the probability that a true edge outscores a false one.

    Computed exactly from ranks (Mann-Whitney U, ties counted half); NaN without both classes.

    Args:
        scores: Edge scores, shape ``(E,)``.
        y: Edge truth (0 or 1), shape ``(E,)``.
    """
    scores = np.asarray(scores, dtype=np.float64)
    true = np.asarray(y) > 0.5
    n_true = int(true.sum())
    n_false = true.size - n_true
    if n_true == 0 or n_false == 0:
        return float("nan")
    ranks = rankdata(scores)
    return float((ranks[true].sum() - n_true * (n_true + 1) / 2) / (n_true * n_false))


def edge_metrics(
    scores: np.ndarray,
    y: np.ndarray,
    *,
    boundary: np.ndarray | None = None,
    target: np.ndarray | None = None,
    cut: float = SCORE_CUT,
) -> dict[str, float]:
    """Efficiency, purity and ROC AUC of scored edges, overall and on subsets.

    Args:
        scores: Edge scores in [0, 1], shape ``(E,)``.
        y: Edge truth, shape ``(E,)``.
        boundary: Edges crossing a partition boundary, shape ``(E,)`` (optional).
        target: True edges of target particles (pT > 1 GeV, >= 3 hits), shape ``(E,)``:
            ``target_efficiency`` is the fraction of them scored above the cut (optional).
        cut: Score cut.

    Returns:
        ``efficiency``, ``purity``, ``auc``, ``boundary_*`` / ``interior_*`` efficiency and
        purity (NaN without ``boundary``), ``target_efficiency`` and ``masked_purity`` (acorn's:
        selected target edges over selected target plus selected false edges, true edges of
        other particles left out; NaN without ``target``), and the edge counts (the target
        edges and those selected among them: ``n_target_edges``, ``n_target_selected``).
    """
    scores_t = torch.as_tensor(np.asarray(scores, dtype=np.float32))
    y_t = torch.as_tensor(np.asarray(y, dtype=np.float32))
    mask = torch.zeros(scores_t.shape, dtype=torch.bool)
    if boundary is not None:
        mask = torch.as_tensor(np.asarray(boundary, dtype=bool))
    counts = count_edges(scores_t, y_t, mask, cut=cut)
    metrics = dataclasses.asdict(counts.summary())
    if boundary is None:
        for key in list(metrics):
            if key.startswith(("boundary", "interior")):
                metrics[key] = float("nan")
    metrics["auc"] = roc_auc(scores, y)
    metrics["target_efficiency"] = metrics["masked_purity"] = float("nan")
    metrics["n_target_edges"] = metrics["n_target_selected"] = float("nan")
    if target is not None:
        target = np.asarray(target, dtype=bool)
        selected = np.asarray(scores) > cut
        n_target_selected = int((selected & target).sum())
        n_false_selected = int((selected & ~(np.asarray(y) > 0.5)).sum())
        metrics["target_efficiency"] = ratio(n_target_selected, int(target.sum()))
        metrics["masked_purity"] = ratio(n_target_selected, n_target_selected + n_false_selected)
        metrics["n_target_edges"] = float(target.sum())
        metrics["n_target_selected"] = float(n_target_selected)
    metrics.update({"n_edges": float(len(y_t)), "n_true_edges": float((y_t > 0.5).sum())})
    return metrics


def target_operating_points(
    scores: np.ndarray,
    y: np.ndarray,
    target: np.ndarray,
    *,
    efficiency: float = 0.99,
    purity: float = 0.90,
) -> dict[str, float]:
    """Where a classifier stands on acorn's two axes, over every score cut at once.

    Target edge efficiency (selected target edges over the target edges the graphs hold) and
    masked purity (selected target edges over selected target plus selected false edges; true
    edges of non-target particles are left out), pooled over the edges given (several events
    concatenated).

    Args:
        scores: Edge scores ``(E,)``.
        y: Edge truth ``(E,)``.
        target: True edges of target particles ``(E,)`` bool.
        efficiency: The target efficiency at which the masked purity is read.
        purity: The masked purity at which the target efficiency is read.

    Returns:
        ``masked_purity_at_efficiency`` (at the highest cut keeping ``efficiency`` of the
        target edges), ``cut_at_efficiency``, ``efficiency_at_purity`` (the highest target
        efficiency of a cut with masked purity >= ``purity``; 0 when none reaches it) and
        ``cut_at_purity`` (NaN then); NaN throughout without target edges.
    """
    scores = np.asarray(scores, dtype=np.float64)
    target = np.asarray(target, dtype=bool)
    false = ~(np.asarray(y) > 0.5)
    n_target = int(target.sum())
    nan = float("nan")
    if n_target == 0:
        return dict.fromkeys(
            ("masked_purity_at_efficiency", "cut_at_efficiency", "efficiency_at_purity",
             "cut_at_purity"), nan,
        )  # fmt: skip
    order = np.argsort(-scores, kind="stable")
    ordered = scores[order]
    # Cut just below each distinct score: everything scored at or above it is selected.
    last_of_value = np.r_[ordered[1:] != ordered[:-1], True]
    selected_target = np.cumsum(target[order])[last_of_value]
    selected_false = np.cumsum(false[order])[last_of_value]
    cuts = ordered[last_of_value]
    efficiencies = selected_target / n_target
    purities = selected_target / np.maximum(selected_target + selected_false, 1)
    at = int(np.argmax(efficiencies >= efficiency))
    reaching = np.flatnonzero(purities >= purity)
    best = reaching[np.argmax(efficiencies[reaching])] if reaching.size else None
    return {
        "masked_purity_at_efficiency": float(purities[at]),
        "cut_at_efficiency": float(cuts[at]),
        "efficiency_at_purity": 0.0 if best is None else float(efficiencies[best]),
        "cut_at_purity": nan if best is None else float(cuts[best]),
    }
