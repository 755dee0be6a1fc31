"""A graph built here (or by any partgnn command) as an acorn event's fields.

``partgnn export-acorn`` writes acorn files again for graphs imported from acorn (their own
fields, scores added); for any other graphs file it makes the fields from the graph, in acorn's
unprefixed naming, the one its CTD 2023 configurations read (``node_features: [r, phi, z, eta,
cluster_r_1, ...]``): per hit ``hit_id``, ``r``, ``phi``, ``z`` [mm, rad], ``eta`` and every
per-hit field the file keeps (``cluster_r_1``...); per edge ``edge_index`` (the graph's own
order: inner hit first), ``y`` (truth), every per-edge field kept and, given scores,
``scores``; per track edge (the graph's true edges: the true segments it lacks are not in a
graphs file) ``track_edges``, ``truth_map`` (its graph edge), ``particle_id``, ``pt`` (in the
unit asked for) and ``nhits`` (its particle's hits in the event), which acorn's weighting
conditions read. ``partgnn import-acorn`` reads such files back into the same graphs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data

from partgnn.data.formats.acorn import PT_UNITS
from partgnn.data.graphs.graph_fields import GRAPH_FIELDS

#: The fields the export makes from the graph itself (a kept field of one of these names is
#: left out: the graph's own value is written).
MADE_FIELDS = frozenset({
    "hit_id", "r", "phi", "z", "eta", "edge_index", "y", "scores", "track_edges", "truth_map",
    "particle_id", "pt", "nhits", "event_id",
})  # fmt: skip


def graph_to_acorn_fields(
    graph: Data,
    kept: dict[str, np.ndarray],
    scores: np.ndarray | None = None,
    *,
    pt_unit: str = "MeV",
) -> dict[str, Any]:
    """An acorn event's fields (unprefixed naming) from a partgnn graph.

    Args:
        graph: The graph (N nodes, E edges; its ``pos``, ``edge_index``, ``y``,
            ``particle_id``, ``particle_pt``, ``hit_id``, ``event_id``).
        kept: The fields kept beside it (:meth:`~partgnn.data.files.storage.GraphFile.extra`):
            those of N or E rows are written under their names.
        scores: ``(E,)`` edge scores, or ``None``.
        pt_unit: The unit of the written ``pt`` (:data:`~partgnn.data.formats.acorn.PT_UNITS`).

    Returns:
        Name -> tensor (and ``event_id``), for :func:`~partgnn.data.formats.acorn.write_acorn_file`.
    """
    pos = graph.pos.to(torch.float64)
    r = torch.hypot(pos[:, 0], pos[:, 1])
    n_nodes, n_edges = int(pos.shape[0]), int(graph.edge_index.shape[1])
    true = graph.y.bool()
    true_edges = torch.nonzero(true).flatten()
    track_edges = graph.edge_index[:, true_edges]
    particle = graph.particle_id.long()
    _, which, hits = torch.unique(particle, return_inverse=True, return_counts=True)
    owner = particle[track_edges[0]]
    fields: dict[str, Any] = {
        "hit_id": graph.hit_id.long(),
        "r": r.float(),
        "phi": torch.atan2(pos[:, 1], pos[:, 0]).float(),
        "z": pos[:, 2].float(),
        "eta": torch.asinh(pos[:, 2] / r.clamp(min=1e-9)).float(),
        "edge_index": graph.edge_index.long(),
        "y": true,
        "track_edges": track_edges.long(),
        "truth_map": true_edges.long(),
        "particle_id": owner,
        "pt": (graph.particle_pt.double()[track_edges[0]] / PT_UNITS[pt_unit]).float(),
        "nhits": hits[which[track_edges[0]]],
        "event_id": int(graph.event_id),
    }
    if scores is not None:
        fields["scores"] = torch.from_numpy(np.asarray(scores, dtype=np.float32))
    for name, values in kept.items():
        values = np.asarray(values)
        if name in MADE_FIELDS or name in GRAPH_FIELDS or values.ndim == 0:
            continue
        if values.shape[0] in (n_nodes, n_edges):
            fields[name] = torch.from_numpy(values.copy())
    return fields
