"""One exchange contract: every exchanger implements :class:`partgnn.distributed.exchange.
Exchange`, the model calls it by name (an exchanger that lacks a member fails loudly instead of
taking another path), and the interior-first order is the item's, checked against its edges."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

from partgnn.distributed.context import DistContext
from partgnn.distributed.exchange import Exchange
from partgnn.distributed.exchange_plan import ExchangePlan
from partgnn.distributed.halo_exchange import HaloExchanger
from partgnn.distributed.in_process_exchanges import LoopbackExchange, NoExchange
from partgnn.distributed.interior_first import InteriorFirst
from partgnn.models.compute_policy import ComputePolicy
from partgnn.models.interaction_network import InteractionNetwork
from partgnn.models.replayed_exchange import ReplayedExchange

MEMBERS = (
    "n_owned",
    "n_halo",
    "send_index",
    "hides_communication",
    "context",
    "start",
    "start_reverse",
)


def _exchangers() -> dict[str, object]:
    context = DistContext.one_process("cpu")
    halo = HaloExchanger(ExchangePlan.single(5), context)
    loopback = LoopbackExchange(torch.tensor([0, 2]), 4, hide_communication=True)
    return {
        "HaloExchanger": halo,
        "LoopbackExchange": loopback,
        "NoExchange": NoExchange(4),
        "ReplayedExchange": ReplayedExchange(loopback, 4),
        "ReplayedExchange of NoExchange": ReplayedExchange(NoExchange(4), 4),
    }


EXCHANGERS = (
    "HaloExchanger",
    "LoopbackExchange",
    "NoExchange",
    "ReplayedExchange",
    "ReplayedExchange of NoExchange",
)


@pytest.mark.parametrize("name", EXCHANGERS)
def test_every_exchanger_implements_the_contract(name):
    exchanger = _exchangers()[name]
    assert isinstance(exchanger, Exchange)
    for member in MEMBERS:
        getattr(exchanger, member)  # each answers (a property that raised would fail here)
    rows = torch.arange(4 * 3, dtype=torch.float64).reshape(-1, 3)
    if name == "HaloExchanger":
        rows = torch.arange(5 * 3, dtype=torch.float64).reshape(-1, 3)
    local = exchanger(rows)
    assert local.shape == (exchanger.n_owned + exchanger.n_halo, 3)
    if (
        exchanger.hides_communication
    ):  # (one rank of its own: nothing to start; the rest is collective)
        assert torch.equal(exchanger.start(rows).wait(), local[exchanger.n_owned :])


def test_a_whole_graph_has_an_exchange_with_no_halo_rows():
    """NoExchange: the rows themselves (the same tensor: no copy, the arithmetic of a whole
    graph untouched), nothing started brings rows, nothing sent, no peers."""
    none = NoExchange(4)
    rows = torch.arange(12, dtype=torch.float64).reshape(4, 3)
    assert none(rows) is rows and none.n_halo == 0 and none.context is None
    assert not none.hides_communication and none.send_index.shape == (0,)
    assert none.start(rows).wait().shape == (0, 3)
    assert none.start_reverse(rows[:0]).wait().shape == (0, 3)


def test_the_model_reads_no_exchange_member_by_probing():
    # The model and the partitioned PyG layer call the contract's members by name.
    from partgnn.models import interaction_network, partitioned_layer

    for module in (interaction_network, partitioned_layer):
        assert "getattr(exchange" not in inspect.getsource(module), module.__name__


class _Renamed(LoopbackExchange):
    """An exchanger whose ``hides_communication`` was renamed: not the contract any more."""

    def __getattribute__(self, name: str):
        if name == "hides_communication":
            raise AttributeError(name)
        return super().__getattribute__(name)


def _model_and_inputs(n_edges: int) -> tuple[InteractionNetwork, torch.Tensor, torch.Tensor]:
    """A small float64 Interaction Network with recomputation (the path that can hide an
    exchange), node features of 6 nodes and edge features of ``n_edges`` edges."""
    torch.manual_seed(0)
    model = InteractionNetwork(
        node_features=3, edge_features=2, hidden=8, steps=2, compute=ComputePolicy(recompute=True)
    ).double()
    return model, torch.randn(6, 3, dtype=torch.float64), torch.randn(n_edges, 2).double()


def test_an_exchanger_without_a_member_fails_loudly():
    model, x, edge_attr = _model_and_inputs(7)
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5, 1], [1, 2, 3, 0, 0, 1, 3]])
    renamed = _Renamed(torch.tensor([0, 2]), 4, hide_communication=True)
    assert not isinstance(renamed, Exchange)
    with pytest.raises(AttributeError, match="hides_communication"):
        model(x, edge_index, edge_attr, exchange=renamed)


def test_the_interior_first_order_is_checked_against_its_edges():
    edge_index = torch.tensor([[0, 1, 2, 3], [1, 0, 1, 2]])  # nodes 0-1 owned
    interior = np.array([True, True, False, False])
    order = InteriorFirst.of_plan_edges(interior, edge_index, 2)
    assert order.n_interior == 2 and order.order.tolist() == [0, 1, 2, 3]
    # Another event's mask of as many edges: refused, though the count matches.
    with pytest.raises(ValueError, match="is not that of these 4 edges with 2 owned nodes"):
        InteriorFirst.of_plan_edges(np.array([True, False, True, False]), edge_index, 2)


def test_the_model_refuses_an_order_of_other_edges():
    model, x, edge_attr = _model_and_inputs(4)
    edge_index = torch.tensor([[0, 1, 2, 5], [1, 0, 1, 2]])
    exchange = LoopbackExchange(torch.tensor([0, 2]), 4, hide_communication=True)
    wrong = InteriorFirst.from_interior_mask(np.ones(3, dtype=bool))
    with pytest.raises(ValueError, match="edge_order orders 3 edges, edge_index holds 4"):
        model(x, edge_index, edge_attr, exchange=exchange, edge_order=wrong)
    given = InteriorFirst.of_edges(edge_index, 4)
    assert torch.equal(
        model(x, edge_index, edge_attr, exchange=exchange, edge_order=given),
        model(x, edge_index, edge_attr, exchange=exchange),
    )
