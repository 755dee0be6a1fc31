"""Which PyG layers PartitionedLayer accepts: the allow-list, the refusals and their reasons.

Exactness of the allow-list itself is proved in real processes by
tests/distributed/test_pyg_allow_list.py; here: every class of ``torch_geometric.nn.conv`` is
classified, the allow-list is exactly what that test proves, and the settings that would make a
layer silently wrong are refused (in training mode where only training mode is wrong).
"""

from __future__ import annotations

import inspect

import pytest
import torch
import torch_geometric.nn.conv as pyg_conv
from torch import nn
from torch_geometric.nn import (
    EdgeConv,
    GATConv,
    GatedGraphConv,
    GENConv,
    GINConv,
    GraphConv,
    MessagePassing,
    PointNetConv,
    SAGEConv,
)
from torch_geometric.nn.norm import GraphNorm, LayerNorm
from torch_geometric.utils import degree

from partgnn.distributed.context import DistContext
from partgnn.distributed.exchange_plan import ExchangePlan
from partgnn.distributed.halo_exchange import HaloExchanger
from partgnn.models.partitioned_layer import PartitionedLayer
from partgnn.models.pyg_support import EXACT_LAYERS, REFUSED_LAYERS
from tests.distributed.pyg_allow_list_worker import CASES

N_NODES = 10


def _conv_classes() -> dict[str, type]:
    return {
        name: getattr(pyg_conv, name)
        for name in pyg_conv.__all__
        if inspect.isclass(getattr(pyg_conv, name))
        and issubclass(getattr(pyg_conv, name), nn.Module)
    }


def _graph() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(N_NODES, 4, generator=generator)
    edge_index = torch.randint(0, N_NODES, (2, 30), generator=generator)
    return x, edge_index


def _exchange() -> HaloExchanger:
    """The P = 1 exchange (identity, no process group needed)."""
    context = DistContext.one_process("cpu")
    return HaloExchanger(ExchangePlan.single(N_NODES), context)


def _mlp(*middle: nn.Module) -> nn.Sequential:
    return nn.Sequential(nn.Linear(4, 8), *middle, nn.ReLU(), nn.Linear(8, 8))


def test_every_conv_class_is_allow_listed_or_refused_with_a_reason():
    classes = _conv_classes()
    unclassified = sorted(set(classes) - set(EXACT_LAYERS) - set(REFUSED_LAYERS))
    assert not unclassified, f"classify these PyG layers (allow-list or refused): {unclassified}"
    assert not set(EXACT_LAYERS) & set(REFUSED_LAYERS)
    assert all(len(reason) > 10 for reason in REFUSED_LAYERS.values())
    stale = sorted((set(EXACT_LAYERS) | set(REFUSED_LAYERS)) - set(classes))
    assert not stale, f"not in this PyG's torch_geometric.nn.conv: {stale}"


def test_the_allow_list_is_exactly_what_the_multi_rank_test_proves():
    proven = {type(case.build()).__name__ for case in CASES.values()}
    assert proven == set(EXACT_LAYERS)


@pytest.mark.parametrize("name", sorted(REFUSED_LAYERS))
def test_every_refused_class_is_refused_with_its_reason(name):
    cls = _conv_classes()[name]
    layer = cls.__new__(cls)  # refused by class, before any of its state is looked at
    with pytest.raises(ValueError, match=f"{name} is not exact on a partition: it "):
        PartitionedLayer(layer)


def test_refuses_settings_that_propagate_several_hops_or_depend_on_edge_order():
    with pytest.raises(ValueError, match=r"GatedGraphConv\(num_layers=3\) propagates several"):
        PartitionedLayer(GatedGraphConv(8, num_layers=3))
    PartitionedLayer(GatedGraphConv(8, num_layers=1))
    with pytest.raises(ValueError, match="aggregates with LSTMAggregation"):
        PartitionedLayer(SAGEConv(4, 8, aggr="lstm"))
    with pytest.raises(ValueError, match="aggregates with SortAggregation"):
        PartitionedLayer(SAGEConv(4, 8, aggr="sort", aggr_kwargs={"k": 2}))


def test_refuses_graph_level_norms_in_every_mode():
    class Normed(GINConv):
        pass

    with pytest.raises(ValueError, match="contains GraphNorm"):
        PartitionedLayer(GINConv(_mlp(GraphNorm(8))).eval())
    with pytest.raises(ValueError, match="contains LayerNorm"):
        PartitionedLayer(GINConv(_mlp(LayerNorm(8, mode="graph"))))
    PartitionedLayer(GINConv(_mlp(LayerNorm(8, mode="node"))))
    PartitionedLayer(GINConv(_mlp(nn.LayerNorm(8))))
    with pytest.raises(ValueError, match="contains GraphNorm"):
        PartitionedLayer(Normed(_mlp(GraphNorm(8))), assume_exact=True)


@pytest.mark.parametrize(
    "make_layer, match",
    [
        (lambda: GENConv(4, 8), "GENConv contains BatchNorm1d with batch statistics"),
        (lambda: GINConv(_mlp(nn.BatchNorm1d(8))), "GINConv contains BatchNorm1d"),
        (lambda: EdgeConv(nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8))), "BatchNorm1d"),
        (lambda: GATConv(4, 8, dropout=0.5), r"GATConv contains dropout \(GATConv, p=0.5\)"),
        (lambda: GINConv(_mlp(nn.Dropout(0.2))), r"dropout \(Dropout, p=0.2\)"),
    ],
)
def test_batch_statistics_and_dropout_are_refused_in_training_mode_only(make_layer, match):
    torch.manual_seed(0)
    wrapped = PartitionedLayer(make_layer())  # accepted: eval mode is exact
    x, edge_index = _graph()
    with pytest.raises(ValueError, match=match):
        wrapped(x, edge_index, _exchange())
    with pytest.raises(ValueError, match=match):
        wrapped(x, edge_index)  # the same refusal on a whole graph: training must not differ
    wrapped.eval()
    assert wrapped(x, edge_index, _exchange()).shape[0] == N_NODES


def test_batch_norm_without_running_statistics_is_refused_in_eval_mode_too():
    layer = GINConv(_mlp(nn.BatchNorm1d(8, track_running_stats=False))).eval()
    x, edge_index = _graph()
    with pytest.raises(ValueError, match="batch statistics"):
        PartitionedLayer(layer)(x, edge_index, _exchange())


class SourceDegreeNorm(MessagePassing):
    """A small layer normalised by the source node's degree: inexact on a partition."""

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        out_degree = degree(edge_index[0], x.shape[0]).clamp(min=1)
        return self.propagate(edge_index, x=x / out_degree.unsqueeze(-1))


def test_own_layers_need_assume_exact():
    with pytest.raises(ValueError, match="SourceDegreeNorm is not on the allow-list"):
        PartitionedLayer(SourceDegreeNorm())

    class MyGraphConv(GraphConv):  # a subclass may change what the PyG class proved
        pass

    with pytest.raises(ValueError, match="MyGraphConv is not on the allow-list"):
        PartitionedLayer(MyGraphConv(4, 8))
    PartitionedLayer(MyGraphConv(4, 8), assume_exact=True)
    with pytest.raises(TypeError, match="MessagePassing layer"):
        PartitionedLayer(nn.Linear(4, 8), assume_exact=True)


def test_per_node_inputs_are_owned_rows():
    torch.manual_seed(0)
    wrapped = PartitionedLayer(PointNetConv(nn.Linear(7, 8)))
    x, edge_index = _graph()
    pos = torch.randn(N_NODES, 3)
    out = wrapped(x, edge_index, _exchange(), pos=pos)
    assert torch.equal(out, wrapped.layer(x, pos, edge_index))
    with pytest.raises(ValueError, match="pos has 9 rows, x_owned has 10"):
        wrapped(x, edge_index, _exchange(), pos=pos[:-1])
