import math

import numpy as np
import pytest
import torch

from partgnn.metrics.edge_counts import EdgeCounts, best_score_cut, count_edges, score_histograms
from partgnn.metrics.edge_metrics import edge_metrics, roc_auc, target_operating_points


def test_counts_on_a_hand_made_set_of_edges():
    scores = torch.tensor([0.9, 0.8, 0.2, 0.1, 0.7, 0.3])
    y = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 0.0])
    boundary = torch.tensor([False, False, False, False, True, True])
    counts = count_edges(scores, y, boundary)
    assert counts.as_tuple() == (2, 1, 1, 2, 1, 0, 0, 1)
    assert counts.efficiency == 2 / 3 and counts.purity == 2 / 3
    assert counts.boundary_efficiency == 1.0 and counts.boundary_purity == 1.0
    assert counts.interior_efficiency == 1 / 2 and counts.interior_purity == 1 / 2


def test_lost_boundary_edges_count_as_missed():
    counts = count_edges(
        torch.tensor([0.9]),
        torch.tensor([1.0]),
        torch.tensor([False]),
        lost_y=torch.tensor([1.0, 1.0, 0.0]),
    )
    assert (counts.tp, counts.fn, counts.tn) == (1, 2, 1)
    assert counts.boundary_efficiency == 0.0
    assert math.isnan(counts.boundary_purity)
    assert counts.interior_efficiency == 1.0
    assert (counts + EdgeCounts(tp=1)).tp == 2


@pytest.mark.parametrize(
    ("scores", "expected"),
    [
        ([0.9, 0.8, 0.2, 0.1], 1.0),
        ([0.1, 0.2, 0.8, 0.9], 0.0),
        ([0.5, 0.5, 0.5, 0.5], 0.5),
        ([0.9, 0.3, 0.6, 0.1], 0.75),
    ],
)
def test_roc_auc_hand_computed(scores, expected):
    assert roc_auc(np.array(scores), np.array([1, 1, 0, 0])) == pytest.approx(expected)


def test_roc_auc_without_both_classes_is_nan():
    assert math.isnan(roc_auc(np.array([0.1, 0.2]), np.array([1, 1])))


def test_edge_metrics_with_target_and_boundary():
    scores = np.array([0.9, 0.2, 0.7, 0.4])
    y = np.array([1, 1, 1, 0])
    metrics = edge_metrics(
        scores, y, boundary=np.array([0, 1, 0, 0]), target=np.array([1, 1, 0, 0])
    )
    assert metrics["target_efficiency"] == 0.5
    assert metrics["efficiency"] == 2 / 3 and metrics["purity"] == 1.0
    assert metrics["boundary_efficiency"] == 0.0 and metrics["interior_efficiency"] == 1.0
    assert metrics["auc"] == pytest.approx(2 / 3)  # 0.2 < 0.4: one of three pairs misordered
    plain = edge_metrics(scores, y)
    assert math.isnan(plain["boundary_efficiency"]) and math.isnan(plain["target_efficiency"])


def test_masked_purity_leaves_out_true_edges_of_other_particles():
    """acorn's masked purity: selected target edges / (selected target + selected false)."""
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.1])
    y = np.array([1, 1, 0, 1, 0])
    target = np.array([1, 0, 0, 1, 0], dtype=bool)  # edge 1: true, of a non-target particle
    metrics = edge_metrics(scores, y, target=target, cut=0.5)
    assert metrics["target_efficiency"] == 1.0
    assert metrics["masked_purity"] == pytest.approx(2 / 3)  # edge 2 is false, edge 1 left out
    assert metrics["purity"] == pytest.approx(3 / 4)


def test_target_operating_points_on_a_hand_made_ranking():
    # Ranked: T F T N F T (T target, F false, N true of a non-target particle).
    scores = np.array([0.95, 0.9, 0.8, 0.7, 0.6, 0.5])
    y = np.array([1, 0, 1, 1, 0, 1])
    target = np.array([1, 0, 1, 0, 0, 1], dtype=bool)
    points = target_operating_points(scores, y, target, efficiency=0.6, purity=0.6)
    # 2 of 3 targets (>= 0.6) first at the cut 0.8: 2 targets, 1 false selected.
    assert points["masked_purity_at_efficiency"] == pytest.approx(2 / 3)
    assert points["cut_at_efficiency"] == 0.8
    # Purity >= 0.6 at cuts 0.95 (1/1), 0.8 (2/3), 0.7 (2/3), 0.5 (3/5): the best efficiency is
    # all three targets at 0.5.
    assert points["efficiency_at_purity"] == 1.0 and points["cut_at_purity"] == 0.5
    unreachable = target_operating_points(scores, y, target, purity=1.01)
    assert unreachable["efficiency_at_purity"] == 0.0 and math.isnan(unreachable["cut_at_purity"])
    none = target_operating_points(scores, y, np.zeros(6, dtype=bool))
    assert all(math.isnan(value) for value in none.values())


def test_best_score_cut_maximises_f1_on_a_known_case():
    # True edges at 0.9, 0.8, 0.3; false edges at 0.6, 0.1, 0.05; one lost true edge.
    scores = torch.tensor([0.9, 0.8, 0.3, 0.6, 0.1, 0.05])
    y = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    histograms = score_histograms(scores, y, lost_y=torch.tensor([1.0]))
    assert histograms.sum(1).tolist() == [4, 3]
    best = best_score_cut(histograms)
    # Cut in (0.6, 0.8]: tp 2, fp 0, fn 2 -> F1 2/3; cut in (0.3, 0.6]: tp 2, fp 1 -> 4/7;
    # cut in (0.1, 0.3]: tp 3, fp 1, fn 1 -> 6/8 = 0.75, the best.
    assert 0.1 < best["cut"] <= 0.3
    assert best["fscore"] == pytest.approx(0.75)
    assert best["efficiency"] == pytest.approx(0.75) and best["purity"] == pytest.approx(0.75)
    # beta = 0.5 weighs purity: the cut in (0.6, 0.8] (tp 2, fp 0, fn 2) scores
    # 1.25 * 2 / (1.25 * 2 + 0.25 * 2) = 5/6 against 3.75 / 5 = 0.75 below 0.3.
    purer = best_score_cut(histograms, beta=0.5)
    assert 0.6 < purer["cut"] <= 0.8
    assert purer["fscore"] == pytest.approx(5 / 6) and purer["purity"] == 1.0
    # Adding histograms is adding events.
    assert torch.equal(
        histograms + histograms,
        score_histograms(scores.repeat(2), y.repeat(2))
        + torch.tensor([[2] + [0] * 199, [0] * 200]),
    )
