"""One rank of the PyG-layer exactness check: two-layer stacks of PyG layers on this rank's shard.

For every partition method, layer kind and dtype it runs a :class:`LayerStack` of two
:class:`~partgnn.models.partitioned_layer.PartitionedLayer` on event 0 of ``ROOT/<method>``
(shards for this world size), backpropagates :func:`node_loss` of the owned outputs,
all-reduces the parameter gradients and the loss over the ranks, and saves what
tests/distributed/test_pyg_layers.py compares against the bare layers on the whole graph: owned
outputs with their global node ids, the summed gradients, the loss and the exchange counts.

The stacks and the loss are defined here and imported by the test, so both sides build the same
model. Run by ``tests/distributed/launch.py`` (RANK, WORLD_SIZE, MASTER_ADDR/PORT set).
"""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.nn import (
    EdgeConv,
    GATConv,
    GCNConv,
    GINConv,
    GINEConv,
    GraphConv,
    MessagePassing,
    SAGEConv,
)

from partgnn.data.graphs.graph_config import EDGE_FEATURES, NODE_FEATURES
from partgnn.distributed.communication_counter import CommunicationCounter
from partgnn.distributed.context import DistContext
from partgnn.distributed.halo_exchange import HaloExchanger
from partgnn.models.interaction_network import Exchange
from partgnn.models.partitioned_layer import PartitionedLayer
from partgnn.partition.rank_event import RankEvent
from tests.distributed.partitioned_run import worker_main
from tests.distributed.reference import DTYPES, summed_over_ranks

HIDDEN = 8
#: Layer kinds: ``gcn_weighted`` is an improved GCN with edge weights learnt from edge_attr
#: (so gradients flow through the exchanged degrees); ``*_edge`` and ``gine`` use edge_attr.
KINDS = ("gcn", "gcn_weighted", "graph", "sage", "gat", "gat_edge", "edge", "gin", "gine")


def make_layer(kind: str, in_channels: int, out_channels: int, edge_dim: int) -> MessagePassing:
    """One bare PyG layer of ``kind``, ``in_channels -> out_channels`` features."""

    def mlp(width_in: int) -> nn.Sequential:
        return nn.Sequential(
            nn.Linear(width_in, out_channels), nn.Tanh(), nn.Linear(out_channels, out_channels)
        )

    if kind == "gcn":
        return GCNConv(in_channels, out_channels)
    if kind == "gcn_weighted":
        return GCNConv(in_channels, out_channels, improved=True)
    if kind == "graph":
        return GraphConv(in_channels, out_channels)
    if kind == "sage":
        return SAGEConv(in_channels, out_channels)
    if kind == "gat":
        return GATConv(in_channels, out_channels // 2, heads=2)
    if kind == "gat_edge":
        return GATConv(in_channels, out_channels // 2, heads=2, edge_dim=edge_dim)
    if kind == "edge":
        return EdgeConv(mlp(2 * in_channels), aggr="max")
    if kind == "gin":
        return GINConv(mlp(in_channels), train_eps=True)
    if kind == "gine":
        return GINEConv(mlp(in_channels), train_eps=True, edge_dim=edge_dim)
    raise ValueError(f"unknown layer kind {kind!r}")


class LayerStack(nn.Module):
    """``layer -> ReLU -> layer`` of one kind, every layer wrapped in a PartitionedLayer."""

    def __init__(self, kind: str, node_features: int, edge_features: int) -> None:
        super().__init__()
        self.kind = kind
        self.convs = nn.ModuleList(
            PartitionedLayer(make_layer(kind, width, HIDDEN, edge_features))
            for width in (node_features, HIDDEN)
        )
        self.edge_weight = nn.Linear(edge_features, 1) if kind == "gcn_weighted" else None

    def edge_kwargs(self, edge_attr: torch.Tensor) -> dict[str, torch.Tensor]:
        """The edge arguments of this kind's layers, one row per edge."""
        if self.edge_weight is not None:
            # Positive weights that depend on parameters: their gradient passes through the
            # degrees, on both endpoints.
            return {"edge_weight": torch.sigmoid(self.edge_weight(edge_attr)).squeeze(-1) + 0.5}
        if self.kind in ("gat_edge", "gine"):
            return {"edge_attr": edge_attr}
        return {}

    def forward(
        self,
        x_owned: torch.Tensor,
        edge_index: torch.Tensor,
        edge_attr: torch.Tensor,
        exchange: Exchange | None = None,
    ) -> torch.Tensor:
        kwargs = self.edge_kwargs(edge_attr)
        h = self.convs[0](x_owned, edge_index, exchange, **kwargs).relu()
        return self.convs[1](h, edge_index, exchange, **kwargs)

    def forward_bare(
        self, x: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor
    ) -> torch.Tensor:
        """The same computation with the bare PyG layers (the whole-graph reference)."""
        kwargs = self.edge_kwargs(edge_attr)
        h = self.convs[0].layer(x, edge_index, **kwargs).relu()
        return self.convs[1].layer(h, edge_index, **kwargs)


def build_stack(kind: str, dtype: torch.dtype) -> LayerStack:
    """A stack with the same initial weights in every process, for the graphs' feature widths."""
    torch.manual_seed(4321)
    return LayerStack(kind, node_features=len(NODE_FEATURES), edge_features=len(EDGE_FEATURES)).to(
        dtype
    )


def node_loss(out: torch.Tensor) -> torch.Tensor:
    """A sum over nodes of a nonlinear function of each node's outputs."""
    return (torch.sin(out) + 0.1 * out.square()).sum()


def expected_exchanges(kind: str) -> tuple[int, int]:
    """Forward and backward exchanges of one stack on P > 1 ranks.

    Each layer exchanges its input (GCN: and the degrees). The first layer's input needs no
    gradient, so only the second layer's feature exchange runs backward - plus both degree
    exchanges when the edge weights are learnt.
    """
    is_gcn = kind.startswith("gcn")
    return (4 if is_gcn else 2), (3 if kind == "gcn_weighted" else 1)


def run_stacks(event: RankEvent, context: DistContext) -> dict[tuple[str, str], dict]:
    """Every stack in every dtype on this rank's event: owned outputs, gradients, exchanges."""
    graph, n_owned = event.graph, event.plan.n_owned
    results = {}
    for kind in KINDS:
        for dtype_name, dtype in DTYPES.items():
            stack = build_stack(kind, dtype)
            counter = CommunicationCounter()
            exchange = HaloExchanger.for_plan(event.plan, context, counter=counter)
            out = stack(
                graph.x[:n_owned].to(dtype), graph.edge_index, graph.edge_attr.to(dtype), exchange
            )
            loss = node_loss(out)
            loss.backward()
            grads, total_loss = summed_over_ranks(stack, loss, context.group)
            results[(kind, dtype_name)] = {
                "nodes": torch.from_numpy(event.plan.owned_nodes),
                "out": out.detach(),
                "grads": grads,
                "loss": total_loss,
                "exchanges": (counter.forward_exchanges, counter.backward_exchanges),
            }
    return results


if __name__ == "__main__":
    worker_main(run_stacks)
