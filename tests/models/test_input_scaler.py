"""The input standardisation module."""

from __future__ import annotations

import pytest
import torch

from partgnn.models.input_scaler import InputScaler
from partgnn.models.interaction_network import InteractionNetwork


def test_scaler_is_the_identity_until_fitted_and_standardises_after():
    scaler = InputScaler(2, 3)
    x, e = torch.randn(5, 2), torch.randn(4, 3)
    same_x, same_e = scaler(x, e)
    assert torch.equal(same_x, x) and torch.equal(same_e, e)
    scaler.set_statistics(
        torch.tensor([1.0, -2.0]),
        torch.tensor([2.0, 0.5]),
        torch.tensor([0.0, 0.0, 3.0]),
        torch.tensor([1.0, 4.0, 0.0]),  # a constant column: only centred
    )
    out_x, out_e = scaler(x, e)
    torch.testing.assert_close(out_x, (x - torch.tensor([1.0, -2.0])) / torch.tensor([2.0, 0.5]))
    torch.testing.assert_close(out_e[:, 1], e[:, 1] / 4.0)
    torch.testing.assert_close(out_e[:, 2], e[:, 2] - 3.0)


def test_scaler_rejects_wrong_widths_and_non_finite_values():
    scaler = InputScaler(2, 1)
    with pytest.raises(ValueError, match="node_mean has 3 values for 2 features"):
        scaler.set_statistics(torch.zeros(3), torch.ones(2), torch.zeros(1), torch.ones(1))
    with pytest.raises(ValueError, match="edge_std holds NaN"):
        scaler.set_statistics(
            torch.zeros(2), torch.ones(2), torch.zeros(1), torch.tensor([float("nan")])
        )


def test_statistics_travel_in_the_model_state_dict():
    model = InteractionNetwork(node_features=2, edge_features=1, hidden=8, steps=1)
    model.input_scaler.set_statistics(
        torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0]), torch.tensor([5.0]), torch.tensor([6.0])
    )
    state = model.state_dict()
    assert state["input_scaler.node_std"].tolist() == [3.0, 4.0]
    copy = InteractionNetwork(node_features=2, edge_features=1, hidden=8, steps=1)
    copy.load_state_dict(state)
    x, e = torch.randn(3, 2), torch.randn(2, 1)
    edge_index = torch.tensor([[0, 1], [1, 2]])
    torch.testing.assert_close(copy(x, edge_index, e), model(x, edge_index, e))
