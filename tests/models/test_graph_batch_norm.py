"""GraphBatchNorm: torch's BatchNorm of the graph's rows, counting the rows a rank counts.

Across ranks it is proven in real processes (tests/distributed/test_exactness.py); here the
single-process semantics: the statistics of every row, or of the counted rows only, and the
MLPs built with it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from partgnn.models.graph_batch_norm import (
    GraphBatchNorm,
    GroupStatistics,
    _GraphBatchNorm,
    statistics,
)
from partgnn.models.mlp import make_mlp


def test_equals_torch_batch_norm_without_running_statistics():
    torch.manual_seed(0)
    z = torch.randn(50, 8, dtype=torch.float64, requires_grad=True)
    norm = GraphBatchNorm(8, "edges").double()
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-1, 1)
    reference = nn.BatchNorm1d(8, track_running_stats=False).double()
    reference.load_state_dict(norm.state_dict())
    torch.testing.assert_close(norm(z), reference(z), rtol=1e-12, atol=1e-12)
    grad = torch.autograd.grad(norm(z).sin().sum(), z)[0]
    expected = torch.autograd.grad(reference(z).sin().sum(), z)[0]
    torch.testing.assert_close(grad, expected, rtol=1e-10, atol=1e-12)
    # Scoring is normalised with the scored rows' statistics too (no running statistics).
    norm.eval()
    torch.testing.assert_close(norm(z), reference(z), rtol=1e-12, atol=1e-12)


def test_edge_rows_not_counted_take_the_counted_rows_statistics():
    """A rank's duplicate of a cut edge (not counted there) is normalised with the statistics
    of the counted rows; node rows always all count."""
    torch.manual_seed(1)
    z = torch.randn(30, 4, dtype=torch.float64)
    count = torch.arange(30) % 3 != 0
    with statistics(GroupStatistics(count)):
        edges = GraphBatchNorm(4, "edges").double()(z)
        nodes = GraphBatchNorm(4, "nodes").double()(z)
    counted = z[count]
    expected = (z - counted.mean(0)) / torch.sqrt(counted.var(0, unbiased=False) + 1e-5)
    torch.testing.assert_close(edges, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(nodes, nn.functional.batch_norm(z, None, None, training=True))


def test_gradients_of_weights_and_bias_equal_torch_batch_norm():
    torch.manual_seed(2)
    z = torch.randn(40, 6, dtype=torch.float64)
    norm = GraphBatchNorm(6, "nodes").double()
    reference = nn.BatchNorm1d(6, track_running_stats=False).double()
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-1, 1)
    reference.load_state_dict(norm.state_dict())
    mine = torch.autograd.grad(norm(z).cos().sum(), [norm.weight, norm.bias])
    theirs = torch.autograd.grad(reference(z).cos().sum(), [reference.weight, reference.bias])
    for got, expected in zip(mine, theirs, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("counted", ["all", "some"])
def test_backward_is_the_gradient_of_the_forward(counted):
    """The closed-form backward against finite differences, with rows not counted (a cut
    edge's duplicate: normalised, not in the statistics) among them."""
    torch.manual_seed(3)
    z = torch.randn(12, 3, dtype=torch.float64, requires_grad=True)
    weight = torch.rand(3, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(3, dtype=torch.float64, requires_grad=True)
    count = None if counted == "all" else torch.arange(12) % 4 != 1
    norm = GraphBatchNorm(3, "edges").double()

    def normalised(z, weight, bias):
        with torch.no_grad():
            norm.weight.copy_(weight)
            norm.bias.copy_(bias)
        with statistics(GroupStatistics(count)):
            return norm(z)

    def function(z, weight, bias):  # the parameters as inputs, for gradcheck
        return _GraphBatchNorm.apply(z, weight, bias, count, GroupStatistics(count), 1e-5)

    assert torch.autograd.gradcheck(function, (z, weight, bias))
    torch.testing.assert_close(normalised(z, weight, bias), function(z, weight, bias))


def test_edge_count_of_another_graph_is_refused():
    with (
        statistics(GroupStatistics(torch.ones(5, dtype=torch.bool))),
        pytest.raises(ValueError, match="3 edge rows, the graph has 5 local edges"),
    ):
        GraphBatchNorm(2, "edges")(torch.zeros(3, 2))


def test_mlp_with_batch_norm_follows_the_reference():
    """Linear (no bias) -> BatchNorm -> activation for hidden layers, then Linear ->
    activation; LayerNorm and BatchNorm together are refused."""
    mlp = make_mlp(6, 8, 8, layers=3, layer_norm=False, batch_norm="nodes")
    kinds = [type(module).__name__ for module in mlp]
    assert kinds == ["Linear", "GraphBatchNorm", "ReLU"] * 2 + ["Linear", "ReLU"]
    assert mlp[0].bias is None and mlp[3].bias is None and mlp[6].bias is not None
    with pytest.raises(ValueError, match="LayerNorm or BatchNorm, not both"):
        make_mlp(6, 8, 8, batch_norm="edges")
