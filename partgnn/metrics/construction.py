"""Graph construction efficiency: the fraction of an event's target doublets its graph holds.

A target doublet is a true consecutive pair of hits of one particle
(:func:`~partgnn.data.graphs.graph_builder.true_consecutive_pairs`: ordered by distance from the
production vertex, double hits on one layer each paired with the next layer's) whose particle
has pT > ``pt_min`` (and <= ``pt_max``) and at least 3 hits in the event, the same particles
whose edges :func:`~partgnn.metrics.evaluation.target_edges` counts in a graph. The graph holds
a doublet when both hits are nodes and an edge joins them (either direction). Counted from the
events file, not from the graph, so hits a construction dropped (a pT cut, a module it never
saw) count as lost. Particles produced away from the beam line (a production vertex radius
above :data:`BEAM_LINE_MM`: secondaries of interactions in the material, decays) are counted
apart too: many constructions (module maps fitted on primaries) aim at the beam-line ones only.
"""

from __future__ import annotations

import numpy as np
from torch_geometric.data import Data

from partgnn.data.event import Event
from partgnn.data.graphs.graph_builder import particle_properties, true_consecutive_pairs

#: Production vertex radius [mm] up to which a particle counts as made on the beam line.
BEAM_LINE_MM = 1.0


def construction_counts(
    event: Event, graph: Data, pt_min: float, pt_max: float | None = None
) -> dict[str, int]:
    """Target doublets of ``event`` and how many ``graph`` holds, in all and on the beam line.

    Args:
        event: The event the graph was built from (hits, truth, particles).
        graph: Its graph: ``hit_id`` (N,) of each node, ``edge_index`` (2, E).
        pt_min: Target particles have pT > ``pt_min`` [GeV].
        pt_max: And pT <= ``pt_max`` when given.

    Returns:
        ``target_doublets``, ``held``, ``beam_line_target_doublets``, ``beam_line_held``.
    """
    hits = event.hits
    particle = event.truth["particle_id"].to_numpy().astype(np.int64)
    # Only layer equality matters to the pairing: (volume, layer) needs no detector description.
    layer = hits["volume_id"].to_numpy().astype(np.int64) * 1000 + hits["layer_id"].to_numpy()
    pt, vertex = particle_properties(event, particle)
    xyz = hits[["x", "y", "z"]].to_numpy(np.float64)
    pairs = true_consecutive_pairs(particle, layer, np.linalg.norm(xyz - vertex, axis=1))
    _, inverse, counts = np.unique(particle, return_inverse=True, return_counts=True)
    first = pairs[:, 0]
    target = (pt[first] > pt_min) & (counts[inverse][first] >= 3)
    if pt_max is not None:
        target &= pt[first] <= pt_max
    pairs = pairs[target]
    beam_line = np.hypot(vertex[pairs[:, 0], 0], vertex[pairs[:, 0], 1]) <= BEAM_LINE_MM

    hit_id = hits["hit_id"].to_numpy().astype(np.int64)
    doublet_ids = np.sort(hit_id[pairs], axis=1)
    edge_ids = np.sort(graph.hit_id.numpy().astype(np.int64)[graph.edge_index.numpy().T], axis=1)
    stride = int(max(hit_id.max(initial=0), edge_ids.max(initial=0))) + 1
    held = np.isin(
        doublet_ids[:, 0] * stride + doublet_ids[:, 1], edge_ids[:, 0] * stride + edge_ids[:, 1]
    )
    return {
        "target_doublets": len(pairs),
        "held": int(held.sum()),
        "beam_line_target_doublets": int(beam_line.sum()),
        "beam_line_held": int((held & beam_line).sum()),
    }


def construction_summary(rows: list[dict[str, int]]) -> dict[str, float | int]:
    """Counts of :func:`construction_counts` summed over events, with their efficiencies.

    Returns:
        The summed counts and ``efficiency`` (held / target doublets) and
        ``beam_line_efficiency`` (NaN where there is nothing to count).
    """
    total = {key: sum(row[key] for row in rows) for key in rows[0]} if rows else {}
    if not total:
        return {}

    def ratio(held: int, of: int) -> float:
        return held / of if of else float("nan")

    return {
        **total,
        "efficiency": ratio(total["held"], total["target_doublets"]),
        "beam_line_efficiency": ratio(total["beam_line_held"], total["beam_line_target_doublets"]),
    }
