"""The fields of an event graph, and the checks every graph read passes: shapes that agree,
indices within the graph, finite features and positions, labels 0 or 1."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch_geometric.data import Data

from partgnn.errors import InputError

#: Graph fields with one row per node and per edge.
NODE_FIELDS = ("x", "pos", "hit_id", "particle_id", "particle_pt", "layer")
EDGE_FIELDS = ("edge_attr", "y", "edge_pt")

#: Graph fields stored per event, with the dtype they are stored in. ``y`` is stored as uint8
#: and read back as float32.
GRAPH_FIELDS: dict[str, np.dtype] = {
    "x": np.dtype(np.float32),
    "pos": np.dtype(np.float32),
    "edge_index": np.dtype(np.int64),
    "edge_attr": np.dtype(np.float32),
    "y": np.dtype(np.uint8),
    "edge_pt": np.dtype(np.float32),
    "hit_id": np.dtype(np.int64),
    "particle_id": np.dtype(np.int64),
    "particle_pt": np.dtype(np.float32),
    "layer": np.dtype(np.int64),
}


class EventShape(NamedTuple):
    """Sizes of one stored event graph, read from the file's index (nothing decoded).

    Attributes:
        nodes: Node rows (for a rank's shard: owned plus halo).
        edges: Edges.
        halo: Halo nodes among ``nodes`` (0 for a whole graph).
        nbytes: Bytes of all the event's arrays once decoded.
    """

    nodes: int
    edges: int
    halo: int
    nbytes: int


def check_graph(graph: Data, *, where: str) -> None:
    """Raises a one-line InputError (prefixed ``where``) unless the graph's fields agree: 2-D
    ``x`` and ``edge_attr``, ``edge_index`` ``(2, E)`` within its nodes, one row per node or
    edge in every field, finite features and labels 0 or 1."""
    for name in ("x", "edge_attr"):
        if graph[name].dim() != 2:
            raise InputError(
                f"{where}: {name} must be a 2-D table, got shape {tuple(graph[name].shape)}"
            )
    n_nodes = graph.x.shape[0]
    edge_index = graph.edge_index
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise InputError(
            f"{where}: edge_index must have shape (2, E), got {tuple(edge_index.shape)}"
        )
    if edge_index.numel() and (edge_index.min() < 0 or edge_index.max() >= n_nodes):
        raise InputError(f"{where}: edge_index refers to nodes outside 0..{n_nodes - 1}")
    n_edges = edge_index.shape[1]
    for name in EDGE_FIELDS:
        if graph[name].shape[0] != n_edges:
            raise InputError(f"{where}: {name} has {graph[name].shape[0]} rows, expected {n_edges}")
    for name in NODE_FIELDS:
        if graph[name].shape[0] != n_nodes:
            raise InputError(f"{where}: {name} has {graph[name].shape[0]} rows, expected {n_nodes}")
    for name in ("x", "edge_attr", "pos"):
        finite = torch.isfinite(graph[name])
        if not finite.all():
            raise InputError(f"{where}: {name} holds NaN or inf ({int((~finite).sum())} values)")
    check_labels(graph.y, where=where)


def check_labels(y: torch.Tensor, *, where: str) -> None:
    """Raises a one-line InputError unless every edge label ``y`` ``(E,)`` is 0 or 1."""
    bad = (y != 0) & (y != 1)
    if bool(bad.any()):
        first = int(torch.nonzero(bad)[0, 0])
        raise InputError(f"{where}: edge label y = {y[first].item()} at edge {first} is not 0 or 1")
