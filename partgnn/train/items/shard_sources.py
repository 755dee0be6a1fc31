"""The sources that read a rank's shard: ``halo`` (:class:`HaloSource`: the local graph and its
exchange), ``naive`` (:class:`NaiveSource`: the rank's sector, no exchange) and ``overlapping``
(:class:`OverlappingSource`: the sector grown by the shards' margin), and each event's edge counts
over its whole graph (:func:`global_edge_counts`)."""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from partgnn.data.graphs.input_features import InputFeatures
from partgnn.distributed.communication_counter import CommunicationCounter
from partgnn.distributed.context import DistContext
from partgnn.distributed.halo_exchange import HaloExchanger
from partgnn.distributed.interior_first import InteriorFirst
from partgnn.errors import InputError
from partgnn.partition.naive import naive_sector
from partgnn.partition.rank_event import RankEvent
from partgnn.partition.shard_reader import ShardDirectory, ShardFile
from partgnn.train.items.group_shards import open_group_shard
from partgnn.train.items.train_item import TrainItem, edge_weights, node_fields, to_device
from partgnn.train.items.unconnected_nodes import connected_rows
from partgnn.train.loss import EdgeCountsByKind, EdgeWeights


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
            **node_fields(
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
            weight=edge_weights(self.weights, graph.y, graph.edge_pt, device),
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
            **node_fields(rows, x, edge_index, n_owned, self.device),
            edge_attr=to_device(edge_attr, self.device),
            y=to_device(y, self.device),
            counted=to_device(counted, self.device),
            boundary=to_device(boundary, self.device),
            normaliser=self.weights.normaliser(sector_counts),
            event_normaliser=self.event_normaliser(index, event),
            lost_y=to_device(lost_y, self.device),
            weight=edge_weights(self.weights, y, edge_pt, self.device),
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
