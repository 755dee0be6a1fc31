"""What one rank trains on for one event, in each mode.

A source turns an event index into a :class:`TrainItem`: the rank's graph on its device, the
halo exchange (halo mode), which edges the rank counts in the loss and metrics, which edges cross
the partition boundary, and the loss normaliser:

- ``full`` / ``ddp``: the whole event graph (:class:`WholeGraphSource`); every edge counted;
  normaliser = the event's weighted edge count.
- ``halo``: the rank's shard (:class:`HaloSource`): local graph plus exchange; the rank counts
  the edges whose target it owns; normaliser = the *global* weighted edge count of the event,
  so that the ranks' losses add up to the full-graph loss.
- ``naive``: the rank's sector (:class:`NaiveSource`): owned nodes and interior edges; no
  exchange; normaliser = the sector's own weighted edge count (each sector is trained as an
  independent graph); the boundary edges the rank would count are lost.
- ``overlapping``: the rank's sector extended by the shards' margin of hops
  (:class:`OverlappingSource`), as ``naive`` otherwise; the edges into owned nodes from beyond
  the margin are lost.

Scoring (:mod:`partgnn.train.inference`) reads the same sources: ``item(index, edge_ids=True)``
adds the global ids of the item's edges, and a rank's scores are those of its counted edges.

Weighted edge count: the sum of the edges' loss weights
(:meth:`~partgnn.train.loss.EdgeWeights.normaliser`). When the weights depend on the particles'
pT (``loss.target_pt``), a shard-reading source counts each event's edges of each kind once, at
start: each rank its owned edges, summed over the graph group (every edge is owned by one rank).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from partgnn.data.input_features import InputFeatures
from partgnn.data.storage import GraphFile
from partgnn.distributed.communication_counter import CommunicationCounter
from partgnn.distributed.context import DistContext
from partgnn.distributed.exchange import Exchange
from partgnn.distributed.halo_exchange import HaloExchanger
from partgnn.distributed.interior_first import InteriorFirst
from partgnn.errors import InputError
from partgnn.partition.naive import naive_sector
from partgnn.partition.shard_reader import RankEvent, ShardDirectory, ShardFile, cut_edges
from partgnn.train.group_shards import open_group_shard
from partgnn.train.loss import EdgeCountsByKind, EdgeWeights
from partgnn.train.unconnected_nodes import ConnectedRows, connected_rows


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` on ``device``: to a GPU through pinned memory without blocking the host (the
    copy is ordered on the current stream: the read-ahead thread's own,
    :mod:`partgnn.train.item_cache`)."""
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


@dataclass
class TrainItem:
    """One event as one rank trains on it.

    Attributes:
        event_id: The event.
        x: Node features ``(N_local, F_node)``.
        edge_index: Local edges ``(2, E_local)``.
        edge_attr: Edge features ``(E_local, F_edge)``.
        y: Edge truth ``(E_local,)``.
        counted: Edges this rank counts in loss and metrics ``(E_local,)``.
        boundary: Edges crossing the partition boundary ``(E_local,)``.
        normaliser: Denominator of this rank's loss sum.
        event_normaliser: The whole event's weighted edge count (equal to ``normaliser`` except
            in naive mode, whose sectors normalise by their own count).
        exchange: The halo exchange (``None``: no exchange).
        interior_first: The local edges in the order that hides the exchange (interior edges
            first), checked against ``edge_index`` when built; ``None``: the model's own
            (none, or computed from the edges when it hides an exchange).
        n_owned: Rows of ``x`` this rank owns (the first ones; the others are halo or
            replicated margin nodes).
        lost_y: Truth of the boundary edges this rank should count but cannot score ``(L,)``.
        n_counted: How many edges ``counted`` marks (computed from it when not given).
        counted_index: The positions of the counted edges ``(n_counted,)``, or ``None`` when
            every edge is counted: computed once per event, so a training step selects its
            edges without reading the mask on the host (a synchronisation on GPUs).
        weight: Each local edge's loss weight ``(E_local,)``, or ``None`` when true edges
            weigh ``pos_weight`` and false ones 1 (:meth:`EdgeWeights.per_edge`).
        owned_kept: Which of the rank's owned nodes ``x`` holds, in their order
            ``(n_owned + U,)``, or ``None`` when it holds them all: the ``U`` that no edge
            touches are left out (:mod:`partgnn.train.unconnected_nodes`).
        unconnected_x: Features of the owned nodes left out, in their order ``(U, F_node)``
            (the input statistics count them: :meth:`owned_features`).
        edge_ids: The local edges' ids in the event's whole graph ``(E_local,)``, when asked
            for (scoring: ``item(index, edge_ids=True)``); training items have none.
    """

    event_id: int
    x: torch.Tensor
    edge_index: torch.Tensor
    edge_attr: torch.Tensor
    y: torch.Tensor
    counted: torch.Tensor
    boundary: torch.Tensor
    normaliser: float
    event_normaliser: float
    exchange: Exchange | None = None
    interior_first: InteriorFirst | None = None
    n_owned: int | None = None
    lost_y: torch.Tensor | None = None
    n_counted: int | None = None
    counted_index: torch.Tensor | None = None
    weight: torch.Tensor | None = None
    owned_kept: torch.Tensor | None = None
    unconnected_x: torch.Tensor | None = None
    edge_ids: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.n_owned is None:
            self.n_owned = self.x.shape[0]
        if self.n_counted is None:
            self.n_counted = int(self.counted.sum())
        if self.n_counted < self.counted.shape[0]:
            self.counted_index = self.counted.nonzero().squeeze(1)

    def owned_features(self) -> torch.Tensor:
        """The features of every node the rank owns, those left out of ``x`` too, in their
        order ``(n_owned + U, F_node)``."""
        owned = self.x[: self.n_owned]
        if self.owned_kept is None or self.unconnected_x is None:
            return owned
        rows = owned.new_empty((self.owned_kept.shape[0], owned.shape[1]))
        rows[self.owned_kept] = owned
        rows[~self.owned_kept] = self.unconnected_x
        return rows

    def select_counted(self, values: torch.Tensor) -> torch.Tensor:
        """The rows of ``values`` ``(E_local, *)`` of the counted edges ``(n_counted, *)``."""
        if self.counted_index is None:
            return values
        return values.index_select(0, self.counted_index)


class WholeGraphSource:
    """Whole event graphs from a graphs file (modes ``full`` and ``ddp``).

    Args:
        graphs: Graphs file.
        device: Target device.
        weights: The loss weights of the kinds of edges.
        boundary_shards: Shard directory whose cut marks boundary edges (optional).
        skip_unconnected: Leave out the nodes no edge touches
            (:mod:`partgnn.train.unconnected_nodes`; only for a model they cannot affect).
        features: The model's input columns (default: partgnn's own, the files' tables).
    """

    def __init__(
        self,
        graphs: str | os.PathLike[str],
        device: torch.device,
        weights: EdgeWeights,
        boundary_shards: str | os.PathLike[str] | None = None,
        *,
        skip_unconnected: bool = False,
        features: InputFeatures | None = None,
    ) -> None:
        self.skip_unconnected = skip_unconnected
        self.features = features or InputFeatures.default()
        self.graphs = GraphFile(graphs)
        self.event_ids = self.graphs.event_ids
        self.device = device
        self.weights = weights
        self.boundary_shards = ShardDirectory(boundary_shards) if boundary_shards else None
        if self.boundary_shards is not None:
            self.boundary_shards.check_source(graphs)

    def __len__(self) -> int:
        return len(self.graphs)

    def event_size(self, index: int) -> int:
        """The event graph's edges (what size-bucketed sampling sorts by)."""
        return self.graphs.n_edges(index)

    def close(self) -> None:
        """Closes the graphs file (and the boundary shards need nothing)."""
        self.graphs.close()

    def item(self, index: int, *, edge_ids: bool = False) -> TrainItem:
        """Event ``index`` as this rank computes on it (``edge_ids``: with the edges' ids in
        the whole graph)."""
        graph = self.graphs[index]
        if not self.features.is_default:
            where = f"{self.graphs.path}: event {int(graph.event_id)}"
            graph.x, graph.edge_attr = self.features.select(
                graph,
                self.graphs.extra(index) if self.features.reads_kept_fields else {},
                where=where,
            )
        n_edges = graph.edge_index.shape[1]
        boundary = torch.zeros(n_edges, dtype=torch.bool)
        if self.boundary_shards is not None:
            boundary = torch.from_numpy(cut_edges(self.boundary_shards, index, n_edges))
        normaliser = self.weights.normaliser(self.weights.counts(graph.y, graph.edge_pt))
        n_nodes = graph.x.shape[0]
        rows = connected_rows(graph.edge_index, n_nodes, n_nodes) if self.skip_unconnected else None
        return TrainItem(
            event_id=int(graph.event_id),
            **_node_fields(rows, graph.x, graph.edge_index, n_nodes, self.device),
            edge_attr=to_device(graph.edge_attr, self.device),
            y=to_device(graph.y, self.device),
            counted=torch.ones(n_edges, dtype=torch.bool, device=self.device),
            boundary=to_device(boundary, self.device),
            normaliser=normaliser,
            event_normaliser=normaliser,
            weight=_edge_weights(self.weights, graph.y, graph.edge_pt, self.device),
            edge_ids=torch.arange(n_edges, device=self.device) if edge_ids else None,
        )


def _edge_weights(
    weights: EdgeWeights, y: torch.Tensor, edge_pt: torch.Tensor, device: torch.device
) -> torch.Tensor | None:
    per_edge = weights.per_edge(y, edge_pt)
    return None if per_edge is None else to_device(per_edge, device)


def global_edge_counts(
    shard: ShardFile, context: DistContext, weights: EdgeWeights
) -> list[EdgeCountsByKind]:
    """Each event's edges of each kind over its whole graph: every rank counts the edges it
    owns, summed over the graph group.

    .. warning::
        Collective of the graph group (on its gloo control group where it has one).
    """
    local = torch.tensor(
        [
            [counts.edges, counts.true, counts.nontarget]
            for counts in (
                weights.counts(*shard.owned_edge_truth(index)) for index in range(len(shard))
            )
        ],
        dtype=torch.int64,
    ).reshape(-1, 3)
    if context.group_size > 1:
        group = context.control_group if context.control_group is not None else context.group
        dist.all_reduce(local, group=group)
    return [EdgeCountsByKind(*map(int, row)) for row in local.tolist()]


class _RankShardSource:
    """What the sources reading a rank's shard share: ``shard``, ``event_ids``, the event count,
    the event sizes, the events' weighted edge counts, and the model's input columns of each
    event (:meth:`event`)."""

    def __init__(
        self,
        shards: ShardDirectory,
        context: DistContext,
        weights: EdgeWeights,
        *,
        skip_unconnected: bool = False,
        features: InputFeatures | None = None,
    ) -> None:
        self.check_shards(shards)
        self.features = features or InputFeatures.default()
        self.skip_unconnected = skip_unconnected
        self.device = context.device
        self.shard = open_group_shard(shards, context)
        self.event_ids = list(shards.meta.event_ids)
        self.weights = weights
        # Counted at start when the weights need the edges' pT: the shards' attributes only
        # count true edges.
        self._global_counts = (
            global_edge_counts(self.shard, context, weights) if weights.by_pt else None
        )

    def check_shards(self, shards: ShardDirectory) -> None:
        """Refuses shards this source cannot read (before any collective).

        Raises:
            InputError: One line naming the shard directory.
        """

    def event(self, index: int) -> RankEvent:
        """The rank's event ``index``, its graph's (and sector's) ``x`` and ``edge_attr`` the
        model's input columns (partgnn's own: the shard's tables as they are)."""
        event = self.shard[index]
        if not self.features.is_default:
            where = f"{self.shard.path}: event {event.event_id}"
            for graph, kept in ((event.graph, event.kept), (event.sector, event.sector_kept)):
                if graph is not None and kept is not None:
                    graph.x, graph.edge_attr = self.features.select(
                        graph, kept.nodes, kept.edges, where=where
                    )
        return event

    def event_normaliser(self, index: int, event: RankEvent) -> float:
        """The weighted edge count of event ``index``'s whole graph."""
        if self._global_counts is not None:
            return self.weights.normaliser(self._global_counts[index])
        counts = EdgeCountsByKind(event.n_global_edges, event.n_global_true_edges)
        return self.weights.normaliser(counts)

    def __len__(self) -> int:
        return len(self.shard)

    def event_size(self, index: int) -> int:
        """The whole event graph's edges (the same on every rank)."""
        return self.shard.n_global_edges(index)

    def close(self) -> None:
        """Closes the rank's shard file."""
        self.shard.close()


class HaloSource(_RankShardSource):
    """A rank's shard with its halo exchange (mode ``halo``)."""

    def __init__(
        self,
        shards: ShardDirectory,
        context: DistContext,
        weights: EdgeWeights,
        *,
        transport: str = "auto",
        counter: CommunicationCounter | None = None,
        hide_communication: bool = False,
        interior_first: bool = False,
        skip_unconnected: bool = False,
        features: InputFeatures | None = None,
    ) -> None:
        super().__init__(
            shards, context, weights, skip_unconnected=skip_unconnected, features=features
        )
        self.context = context
        self.transport = transport
        self.counter = counter
        self.hide_communication = hide_communication
        self.interior_first = interior_first and hide_communication and context.group_size > 1

    def item(self, index: int, *, edge_ids: bool = False) -> TrainItem:
        """Event ``index``'s shard and exchange (``edge_ids``: with the edges' ids in the
        whole graph)."""
        event = self.event(index)
        plan, graph, device = event.plan, event.graph, self.context.device
        rows = None
        if self.skip_unconnected:
            rows = connected_rows(graph.edge_index, graph.x.shape[0], plan.n_owned)
        if rows is not None:
            plan = rows.plan(plan)
        exchange = HaloExchanger.for_plan(
            plan,
            self.context,
            transport=self.transport,
            counter=self.counter,
            hide_communication=self.hide_communication,
        )
        # The item's edges on the host (renumbered once, without the nodes left out).
        edges = graph.edge_index if rows is None else rows.renumbered(graph.edge_index)
        edge_order = None
        if self.interior_first:  # checked against the edges the item holds
            edge_order = InteriorFirst.of_plan_edges(
                plan.interior_edges, edges, plan.n_owned, device
            )
        normaliser = self.event_normaliser(index, event)
        return TrainItem(
            event_id=event.event_id,
            **_node_fields(
                rows, graph.x, graph.edge_index, event.plan.n_owned, device, renumbered=edges
            ),
            edge_attr=to_device(graph.edge_attr, device),
            y=to_device(graph.y, device),
            counted=to_device(torch.from_numpy(plan.edge_owned), device),
            boundary=to_device(torch.from_numpy(~plan.interior_edges), device),
            normaliser=normaliser,
            event_normaliser=normaliser,
            exchange=exchange,
            interior_first=edge_order,
            weight=_edge_weights(self.weights, graph.y, graph.edge_pt, device),
            edge_ids=to_device(torch.from_numpy(plan.edge_ids), device) if edge_ids else None,
        )


class NaiveSource(_RankShardSource):
    """A rank's independent sector: its owned nodes and interior edges, without exchange
    (mode ``naive``)."""

    def item(self, index: int, *, edge_ids: bool = False) -> TrainItem:
        """Event ``index``'s sector (``edge_ids``: with the edges' ids in the whole
        graph)."""
        event = self.event(index)
        plan, graph = event.plan, event.graph
        sector = naive_sector(plan)  # what a naive sector is: partition/naive.py's
        interior = torch.from_numpy(plan.interior_edges)  # its edges among the shard's
        # Boundary edges whose target this rank owns: it would count them, but they are lost.
        lost = torch.from_numpy(plan.edge_owned & ~plan.interior_edges)
        return self._item(
            index,
            event,
            graph.x[: sector.n_owned],
            torch.from_numpy(sector.edge_index),
            graph.edge_attr[interior],
            graph.y[interior],
            graph.edge_pt[interior],
            counted=torch.from_numpy(sector.edge_owned),
            boundary=torch.zeros(sector.edge_ids.shape[0], dtype=torch.bool),
            lost_y=graph.y[lost],
            edge_ids=torch.from_numpy(sector.edge_ids) if edge_ids else None,
        )

    def _item(
        self,
        index: int,
        event: RankEvent,
        x: torch.Tensor,
        edge_index: torch.Tensor,
        edge_attr: torch.Tensor,
        y: torch.Tensor,
        edge_pt: torch.Tensor,
        *,
        counted: torch.Tensor,
        boundary: torch.Tensor,
        lost_y: torch.Tensor,
        n_owned: int | None = None,
        edge_ids: torch.Tensor | None = None,
    ) -> TrainItem:
        sector_counts = self.weights.counts(y[counted], edge_pt[counted])
        n_owned = x.shape[0] if n_owned is None else n_owned
        rows = connected_rows(edge_index, x.shape[0], n_owned) if self.skip_unconnected else None
        return TrainItem(
            event_id=event.event_id,
            **_node_fields(rows, x, edge_index, n_owned, self.device),
            edge_attr=to_device(edge_attr, self.device),
            y=to_device(y, self.device),
            counted=to_device(counted, self.device),
            boundary=to_device(boundary, self.device),
            normaliser=self.weights.normaliser(sector_counts),
            event_normaliser=self.event_normaliser(index, event),
            lost_y=to_device(lost_y, self.device),
            weight=_edge_weights(self.weights, y, edge_pt, self.device),
            edge_ids=None if edge_ids is None else to_device(edge_ids, self.device),
        )


class OverlappingSource(NaiveSource):
    """A rank's sector extended by the shards' margin of hops (``partition --margin K``),
    without exchange (mode ``overlapping``): the rank counts the edges into its owned nodes."""

    def check_shards(self, shards: ShardDirectory) -> None:
        if shards.margin < 1:
            raise InputError(
                f"{shards.directory}: overlapping sectors need shards written with a margin "
                "(partition --margin K); these have none: use mode naive, or re-partition"
            )

    def item(self, index: int, *, edge_ids: bool = False) -> TrainItem:
        """Event ``index``'s extended sector (``edge_ids``: with the edges' ids in the whole
        graph)."""
        event = self.event(index)
        sector = event.sector
        edge_index = sector.edge_index
        boundary = (edge_index >= sector.n_owned).any(dim=0)
        # Boundary edges into owned nodes whose source lies beyond the margin are lost.
        plan = event.plan
        in_sector = np.isin(plan.edge_ids, sector.global_edges.numpy())
        lost = torch.from_numpy(plan.edge_owned & ~in_sector)
        return self._item(
            index,
            event,
            sector.x,
            edge_index,
            sector.edge_attr,
            sector.y,
            sector.edge_pt,
            counted=sector.edge_owned,
            boundary=boundary,
            lost_y=event.graph.y[lost],
            n_owned=sector.n_owned,
            edge_ids=sector.global_edges if edge_ids else None,
        )


def _node_fields(
    rows: ConnectedRows | None,
    x: torch.Tensor,
    edge_index: torch.Tensor,
    n_owned: int,
    device: torch.device,
    *,
    renumbered: torch.Tensor | None = None,
) -> dict[str, torch.Tensor | int | None]:
    """A :class:`TrainItem`'s ``x``, ``edge_index``, ``n_owned``, ``owned_kept`` and
    ``unconnected_x`` on ``device``: the graph's, or without the nodes ``rows`` leaves out
    (``renumbered``: ``rows.renumbered(edge_index)`` when the caller has it already)."""
    if rows is None:
        return {
            "x": to_device(x, device), "edge_index": to_device(edge_index, device),
            "n_owned": n_owned,
        }  # fmt: skip
    return {
        "x": to_device(rows.rows(x), device),
        "edge_index": to_device(
            rows.renumbered(edge_index) if renumbered is None else renumbered, device
        ),
        "n_owned": rows.n_owned,
        "owned_kept": to_device(rows.owned_kept, device),
        "unconnected_x": to_device(rows.left_out(x), device),
    }
