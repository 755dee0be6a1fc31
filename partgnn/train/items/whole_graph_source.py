"""Whole event graphs from a graphs file, as modes ``full`` and ``ddp`` train on them: every edge
counted, the loss normalised by the event's weighted edge count."""

from __future__ import annotations

import os

import torch

from partgnn.data.files.storage import GraphFile
from partgnn.data.graphs.input_features import InputFeatures
from partgnn.partition.shard_reader import ShardDirectory, cut_edges
from partgnn.train.items.train_item import TrainItem, edge_weights, node_fields, to_device
from partgnn.train.items.unconnected_nodes import connected_rows
from partgnn.train.loss import EdgeWeights


class WholeGraphSource:
    """Whole event graphs from a graphs file (modes ``full`` and ``ddp``).

    Args:
        graphs: Graphs file.
        device: Target device.
        weights: The loss weights of the kinds of edges.
        boundary_shards: Shard directory whose cut marks boundary edges (optional).
        skip_unconnected: Leave out the nodes no edge touches
            (:mod:`partgnn.train.items.unconnected_nodes`; only for a model they cannot affect).
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
            **node_fields(rows, graph.x, graph.edge_index, n_nodes, self.device),
            edge_attr=to_device(graph.edge_attr, self.device),
            y=to_device(graph.y, self.device),
            counted=torch.ones(n_edges, dtype=torch.bool, device=self.device),
            boundary=to_device(boundary, self.device),
            normaliser=normaliser,
            event_normaliser=normaliser,
            weight=edge_weights(self.weights, graph.y, graph.edge_pt, self.device),
            edge_ids=torch.arange(n_edges, device=self.device) if edge_ids else None,
        )
