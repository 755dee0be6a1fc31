"""Run any PyTorch Geometric message-passing layer on one rank's partition of an event graph.

:class:`PartitionedLayer` wraps a ``torch_geometric.nn.MessagePassing`` layer: it fills the halo
rows with the owners' current features (the rank's halo exchange), runs the layer on the local
graph and keeps the owned rows. Every incoming edge of an owned node is local (the partition
contract of DESIGN.md), so this is exact for every layer whose output at node ``i`` depends only
on ``x_i``, the incoming edges of ``i`` and their source nodes' ``x``: GraphConv, SAGEConv,
GATConv, GATv2Conv, EdgeConv, GINConv, GINEConv, TransformerConv, ... GCNConv also needs the
degrees of its source nodes, which a rank only knows for the nodes it owns: the wrapper exchanges
them too (:func:`gcn_partition_norm`).

Glossary: ``n_owned``/``n_halo`` owned and halo nodes of the rank, ``n_local = n_owned +
n_halo``; ``E_local`` local edges (every edge that touches an owned node); local node order
``[owned; halo]`` as in :class:`~partgnn.partition.halo_plan.HaloPlan`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn
from torch_geometric.nn import (
    APPNP,
    ARMAConv,
    ChebConv,
    DNAConv,
    DynamicEdgeConv,
    EGConv,
    FAConv,
    GCN2Conv,
    GCNConv,
    GravNetConv,
    HypergraphConv,
    LGConv,
    MessagePassing,
    MixHopConv,
    PDNConv,
    SGConv,
    SSGConv,
    TAGConv,
)
from torch_geometric.utils import add_remaining_self_loops, scatter

from partgnn.distributed.context import DistContext
from partgnn.distributed.halo_exchange import (
    CommunicationCounter,
    ExchangePlan,
    HaloExchanger,
    Transport,
)
from partgnn.models.interaction_network import Exchange

if TYPE_CHECKING:
    from partgnn.partition.shard_reader import RankEvent

#: Layers known not to be exact after one halo exchange, and why. They are refused rather than
#: run silently wrong: several hops inside one forward need an exchange per hop, a symmetric
#: (source-degree) normalisation needs degrees a rank does not have, a k-NN graph built inside
#: the layer is not the partition's graph.
INEXACT_LAYERS: dict[type[MessagePassing], str] = {
    APPNP: "propagates K hops in one forward",
    ARMAConv: "propagates several hops in one forward, with source-degree normalisation",
    ChebConv: "propagates K hops in one forward, with source-degree normalisation",
    DNAConv: "normalises by source degrees",
    EGConv: "normalises by source degrees",
    FAConv: "normalises by source degrees",
    GCN2Conv: "normalises by source degrees",
    LGConv: "normalises by source degrees",
    MixHopConv: "propagates several hops in one forward",
    PDNConv: "normalises by source degrees",
    SGConv: "propagates K hops in one forward",
    SSGConv: "propagates K hops in one forward",
    TAGConv: "propagates K hops in one forward",
    DynamicEdgeConv: "builds its own k-NN graph",
    GravNetConv: "builds its own k-NN graph",
    HypergraphConv: "takes a hyperedge incidence, not a graph",
}

#: Keyword arguments that hold one row per local edge (their first dimension is checked).
EDGE_KWARGS: tuple[str, ...] = ("edge_attr", "edge_weight")


class PartitionedLayer(nn.Module):
    """A PyG message-passing layer that runs on a rank's partition and returns owned rows.

    ``forward`` exchanges the owned rows' features so that the halo rows hold their owners'
    values, runs the wrapped layer on the local graph and returns the owned rows. Stack several
    wrappers (with activations between them on the owned rows) to build a multi-layer model; each
    wrapper does its own exchange.

    Exact (equal to the layer on the whole graph, up to float rounding; parameter gradients
    summed over the ranks equal the whole-graph gradients) for every layer whose output at node
    ``i`` depends only on ``x_i``, the incoming edges of ``i`` and their source nodes' ``x``.
    :class:`~torch_geometric.nn.GCNConv` with ``normalize=True`` is made exact with a second,
    one-column exchange of the node degrees (:func:`gcn_partition_norm`). Layers known to be
    inexact (:data:`INEXACT_LAYERS`) are refused.

    With ``exchange=None`` (a whole graph, on one process) ``forward`` is the bare layer.

    Args:
        layer: The layer to wrap; flow ``source_to_target``, nodes along dimension 0.

    Raises:
        TypeError: ``layer`` is not a ``MessagePassing`` layer.
        ValueError: ``layer`` has flow ``target_to_source`` or is in :data:`INEXACT_LAYERS`.

    Shapes:
        - x_owned: ``(n_owned, F_in)``, the owned nodes' features (all nodes on a whole graph).
        - edge_index: ``(2, E_local)``, local node indices in ``[0, n_local)``.
        - edge_attr / edge_weight (optional): ``(E_local, ...)``, one row per local edge.
        - output: ``(n_owned, F_out)``.

    .. warning::
        ``forward`` runs collectives (one halo exchange, two for a normalising GCNConv) and so
        does its backward: every rank of the graph-parallel group must call the same wrappers
        the same number of times in the same order, even a rank with no owned nodes or no
        edges. The output is only the owned rows; the next layer's exchange supplies the halo
        rows it needs.
    """

    def __init__(self, layer: MessagePassing) -> None:
        super().__init__()
        check_partitionable(layer)
        self.layer = layer

    def forward(
        self,
        x_owned: torch.Tensor,
        edge_index: torch.Tensor,
        exchange: Exchange | None = None,
        **edge_kwargs: torch.Tensor,
    ) -> torch.Tensor:
        """Runs the wrapped layer on the rank's local graph.

        Args:
            x_owned: Owned-node features ``(n_owned, F_in)``.
            edge_index: Local edges ``(2, E_local)`` (owned nodes first, then halo nodes).
            exchange: The rank's halo exchange, ``x_owned -> [x_owned; x_halo]`` (e.g. a
                :class:`~partgnn.distributed.halo_exchange.HaloExchanger`); ``None`` on a whole
                graph.
            **edge_kwargs: Further arguments of the layer's ``forward`` (e.g. ``edge_attr``,
                ``edge_weight``), one row per local edge.

        Returns:
            The layer's output at the owned nodes, ``(n_owned, F_out)``.

        Raises:
            ValueError: Shapes that do not fit the exchange or the edges; GCNConv with
                ``cached=True`` on a partition.
            TypeError: The layer returned something other than a tensor.
        """
        n_owned = getattr(exchange, "n_owned", None)
        self._check_inputs(x_owned, edge_index, n_owned, edge_kwargs)
        if exchange is None:
            return self._check_output(self.layer(x_owned, edge_index, **edge_kwargs))
        layer = self.layer
        normalising_gcn = isinstance(layer, GCNConv) and layer.normalize
        if normalising_gcn and layer.cached:
            # Its cache would hold this partition's normalisation for every later graph; the
            # saving is one scalar exchange per forward, not worth a silent staleness risk.
            # Checked before any exchange, so no rank is left waiting in a collective.
            raise ValueError(
                "PartitionedLayer: GCNConv(cached=True) is not supported on a partition "
                "(every event is another graph); use cached=False"
            )
        x_local = exchange(x_owned)
        n_owned = x_owned.shape[0]
        if normalising_gcn:
            edge_index, edge_weight = gcn_partition_norm(
                edge_index,
                edge_kwargs.pop("edge_weight", None),
                n_owned=n_owned,
                n_local=x_local.shape[0],
                exchange=exchange,
                improved=layer.improved,
                add_self_loops=layer.add_self_loops,
                dtype=x_local.dtype,
            )
            # The layer's own forward with normalisation off is lin -> propagate -> bias, so it
            # runs on the edge weights normalised above; the flag is restored whatever happens.
            layer.normalize = False
            try:
                out = layer(x_local, edge_index, edge_weight, **edge_kwargs)
            finally:
                layer.normalize = True
        else:
            out = layer(x_local, edge_index, **edge_kwargs)
        return self._check_output(out)[:n_owned]

    def _check_inputs(
        self,
        x_owned: torch.Tensor,
        edge_index: torch.Tensor,
        n_owned: int | None,
        edge_kwargs: dict[str, torch.Tensor],
    ) -> None:
        name = f"PartitionedLayer({type(self.layer).__name__})"
        if not isinstance(x_owned, torch.Tensor) or x_owned.dim() < 1:
            raise ValueError(f"{name}: x_owned must be a tensor with one row per owned node")
        if self.layer.node_dim % x_owned.dim() != 0:
            raise ValueError(
                f"{name}: the layer's node_dim {self.layer.node_dim} is not dimension 0 of a "
                f"{x_owned.dim()}-dimensional x; nodes must be rows"
            )
        if n_owned is not None and x_owned.shape[0] != n_owned:
            raise ValueError(
                f"{name}: x_owned has {x_owned.shape[0]} rows, the rank owns {n_owned} nodes"
            )
        if not isinstance(edge_index, torch.Tensor) or edge_index.dim() != 2:
            raise ValueError(f"{name}: edge_index must be a (2, E_local) tensor of local indices")
        if edge_index.shape[0] != 2:
            raise ValueError(
                f"{name}: edge_index must have shape (2, E_local) (got {tuple(edge_index.shape)})"
            )
        n_edges = edge_index.shape[1]
        for key in EDGE_KWARGS:
            value = edge_kwargs.get(key)
            if isinstance(value, torch.Tensor) and value.shape[0] != n_edges:
                raise ValueError(
                    f"{name}: {key} has {value.shape[0]} rows, edge_index has {n_edges} edges"
                )

    def _check_output(self, out: object) -> torch.Tensor:
        if not isinstance(out, torch.Tensor):
            raise TypeError(
                f"PartitionedLayer({type(self.layer).__name__}): the layer returned "
                f"{type(out).__name__}, expected a tensor (return_attention_weights is not "
                "supported)"
            )
        return out


def check_partitionable(layer: nn.Module) -> None:
    """Refuses layers that :class:`PartitionedLayer` cannot run exactly.

    Raises:
        TypeError: ``layer`` is not a ``torch_geometric.nn.MessagePassing``.
        ValueError: Its flow is ``target_to_source`` (outputs would depend on outgoing edges,
            which a rank does not all hold), or it is in :data:`INEXACT_LAYERS`.
    """
    if not isinstance(layer, MessagePassing):
        raise TypeError(
            f"PartitionedLayer wraps a torch_geometric MessagePassing layer "
            f"(got {type(layer).__name__})"
        )
    if layer.flow != "source_to_target":
        raise ValueError(
            f"PartitionedLayer: {type(layer).__name__} has flow {layer.flow!r}; only "
            "'source_to_target' is exact on a partition"
        )
    for inexact, reason in INEXACT_LAYERS.items():
        if isinstance(layer, inexact):
            raise ValueError(
                f"PartitionedLayer: {type(layer).__name__} is not exact on a partition "
                f"(it {reason})"
            )


def gcn_partition_norm(
    edge_index: torch.Tensor,
    edge_weight: torch.Tensor | None,
    *,
    n_owned: int,
    n_local: int,
    exchange: Exchange,
    improved: bool = False,
    add_self_loops: bool = True,
    dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GCN's symmetric normalisation ``w_ji / sqrt(deg_j deg_i)`` with the true global degrees.

    Follows ``torch_geometric.nn.conv.gcn_conv.gcn_norm`` step by step (remaining self-loops of
    weight 1, or 2 when ``improved``; in-degree = sum of incoming weights; ``0`` where the degree
    is ``0``) on the local graph. An owned node's degree is complete on its rank, since all its
    incoming edges (its self-loop included) are local; a halo node's is not, so each rank
    computes its owned degrees and the halo exchange brings the halo nodes' degrees from their
    owners. Differentiable with respect to ``edge_weight``: the degree exchange's backward
    returns the halo degrees' gradients to their owners.

    Args:
        edge_index: Local edges ``(2, E_local)``.
        edge_weight: Weights ``(E_local,)``, or ``None`` for ones.
        n_owned: Owned nodes of the rank.
        n_local: Owned plus halo nodes.
        exchange: The rank's halo exchange.
        improved: GCNConv's ``improved`` (self-loops of weight 2).
        add_self_loops: GCNConv's ``add_self_loops``.
        dtype: Dtype of the weights when ``edge_weight`` is ``None``.

    Returns:
        Edges with self-loops ``(2, E')`` and their normalised weights ``(E',)``. Weights of
        edges into halo nodes are exact too, but those nodes' sums are incomplete: use owned
        rows only.

    .. warning::
        Calls ``exchange`` (a collective): every rank must call it at the same point. Its
        backward is a collective too when ``edge_weight`` requires grad, so it must require
        grad on every rank or on none.
    """
    fill_value = 2.0 if improved else 1.0
    if add_self_loops:
        # Also adds loops to halo nodes; they only feed halo rows, which are discarded.
        edge_index, edge_weight = add_remaining_self_loops(
            edge_index, edge_weight, fill_value, n_local
        )
    if edge_weight is None:
        edge_weight = torch.ones(edge_index.shape[1], dtype=dtype, device=edge_index.device)
    src, dst = edge_index[0], edge_index[1]
    degree = scatter(edge_weight, dst, dim=0, dim_size=n_local, reduce="sum")
    degree = exchange(degree[:n_owned].unsqueeze(-1)).squeeze(-1)
    deg_inv_sqrt = degree.pow(-0.5)
    deg_inv_sqrt = deg_inv_sqrt.masked_fill(deg_inv_sqrt == float("inf"), 0.0)
    return edge_index, deg_inv_sqrt[src] * edge_weight * deg_inv_sqrt[dst]


def exchanger_for_event(
    event: RankEvent,
    context: DistContext,
    *,
    transport: Transport = "auto",
    counter: CommunicationCounter | None = None,
) -> HaloExchanger:
    """The halo exchange of one rank's event, on the rank's device.

    Build it once per event and pass it to every :class:`PartitionedLayer` of the model.
    """
    plan = ExchangePlan.from_halo_plan(event.plan, context.device)
    return HaloExchanger(plan, context, transport=transport, counter=counter)
