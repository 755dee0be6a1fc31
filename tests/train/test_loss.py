"""The loss weights: default and target-pT conventions, normaliser = sum of the weights."""

from __future__ import annotations

import pytest
import torch

from partgnn.train.loss import EdgeCountsByKind, EdgeWeights, edge_loss, weighted_count

Y = torch.tensor([0.0, 1.0, 1.0, 1.0, 0.0, 1.0])
PT = torch.tensor([0.0, 0.4, 1.5, 1.0, 0.0, 3.0])  # pT of true edges; 0 for false ones


def test_default_weights_are_pos_weight_for_every_true_edge():
    weights = EdgeWeights(3.0)
    assert weights.per_edge(Y, PT) is None
    counts = weights.counts(Y, None)
    assert counts == EdgeCountsByKind(edges=6, true=4, nontarget=0)
    assert weights.normaliser(counts) == weighted_count(6, 4, 3.0) == 6 + 2 * 4
    logits = torch.linspace(-2, 2, 6, dtype=torch.float64)
    expected = torch.nn.functional.binary_cross_entropy_with_logits(
        logits, Y.double(), weight=1 + 2 * Y.double(), reduction="sum"
    )
    assert edge_loss(logits, Y.double(), 3.0, 1.0) == expected


@pytest.mark.parametrize("nontarget_weight", [0.0, 0.25])
def test_target_pt_weighs_non_target_true_edges_apart(nontarget_weight):
    weights = EdgeWeights(3.0, target_pt=1.0, nontarget_weight=nontarget_weight)
    per_edge = weights.per_edge(Y, PT)
    # pT 1.0 is not above the target cut: targets are the edges of pT 1.5 and 3.0.
    n = nontarget_weight
    assert per_edge.tolist() == [1.0, n, 3.0, n, 1.0, 3.0]
    counts = weights.counts(Y, PT)
    assert counts == EdgeCountsByKind(edges=6, true=4, nontarget=2)
    assert weights.normaliser(counts) == pytest.approx(float(per_edge.sum()), rel=1e-15)
    # Part counts add up to the whole: what the ranks of one event all-reduce.
    halves = weights.counts(Y[:3], PT[:3]) + weights.counts(Y[3:], PT[3:])
    assert halves == counts


def test_left_out_non_target_edges_do_not_move_the_loss():
    weights = EdgeWeights(3.0, target_pt=1.0, nontarget_weight=0.0)
    per_edge = weights.per_edge(Y, PT)
    logits = torch.zeros(6, requires_grad=True)
    edge_loss(logits, Y, 3.0, 1.0, weight=per_edge).backward()
    nontarget = (Y > 0.5) & (PT <= 1.0)
    assert (logits.grad[nontarget] == 0).all()
    assert (logits.grad[~nontarget] != 0).all()


def test_an_event_without_edges_divides_by_one():
    assert EdgeWeights(3.0, target_pt=1.0).normaliser(EdgeCountsByKind(0, 0, 0)) == 1.0
    with pytest.raises(ValueError, match="edge_pt"):
        EdgeWeights(3.0, target_pt=1.0).per_edge(Y, None)
