"""Edge efficiency, purity and ROC AUC of a scores file's edges, overall and on subsets.

Evaluation only (numpy and scipy); the counting it shares with training's validation is in
:mod:`partgnn.metrics.edge_counts`.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.stats import rankdata

from partgnn.metrics.edge_counts import SCORE_CUT, count_edges, ratio


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
        purity (NaN without ``boundary``), ``target_efficiency`` (NaN without ``target``), and
        the edge counts.
    """
    scores_t = torch.as_tensor(np.asarray(scores, dtype=np.float32))
    y_t = torch.as_tensor(np.asarray(y, dtype=np.float32))
    mask = torch.zeros(scores_t.shape, dtype=torch.bool)
    if boundary is not None:
        mask = torch.as_tensor(np.asarray(boundary, dtype=bool))
    counts = count_edges(scores_t, y_t, mask, cut=cut)
    metrics = counts.summary()
    if boundary is None:
        for key in list(metrics):
            if key.startswith(("boundary", "interior")):
                metrics[key] = float("nan")
    metrics["auc"] = roc_auc(scores, y)
    metrics["target_efficiency"] = float("nan")
    if target is not None:
        selected = np.asarray(target, dtype=bool)
        metrics["target_efficiency"] = ratio(
            int((np.asarray(scores)[selected] > cut).sum()), int(selected.sum())
        )
    metrics.update({"n_edges": float(len(y_t)), "n_true_edges": float((y_t > 0.5).sum())})
    return metrics
