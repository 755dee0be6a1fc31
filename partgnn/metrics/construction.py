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

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from torch_geometric.data import Data

from partgnn import json_files
from partgnn.data.event import Event
from partgnn.data.graphs.graph_builder import particle_properties, true_consecutive_pairs

#: Production vertex radius [mm] up to which a particle counts as made on the beam line.
BEAM_LINE_MM = 1.0


@dataclass(frozen=True)
class ConstructionMetrics:
    """How many of the target doublets the graphs hold (the ``construction`` section of an
    evaluation).

    Attributes:
        target_doublets, held: Target doublets, and those the graphs hold.
        beam_line_target_doublets, beam_line_held: The same for particles made on the beam
            line (production vertex radius up to :data:`BEAM_LINE_MM`).
        efficiency: ``held / target_doublets`` (NaN without target doublets).
        beam_line_efficiency: ``beam_line_held / beam_line_target_doublets``.
    """

    target_doublets: int
    held: int
    beam_line_target_doublets: int
    beam_line_held: int
    efficiency: float
    beam_line_efficiency: float

    COUNT_NAMES: ClassVar[tuple[str, ...]] = (
        "target_doublets", "held", "beam_line_target_doublets", "beam_line_held"
    )  # fmt: skip

    @classmethod
    def of_counts(
        cls, *, target_doublets: int, held: int, beam_line_target_doublets: int,
        beam_line_held: int,
    ) -> ConstructionMetrics:  # fmt: skip
        """The figures of these counts."""
        return cls(
            target_doublets, held, beam_line_target_doublets, beam_line_held,
            efficiency=_ratio(held, target_doublets),
            beam_line_efficiency=_ratio(beam_line_held, beam_line_target_doublets),
        )  # fmt: skip

    @classmethod
    def of_json(cls, content: dict[str, Any], where: str) -> ConstructionMetrics:
        """The figures of an evaluation's ``construction`` object (efficiencies recomputed).

        Raises:
            InputError: A count absent or not a whole number (one line naming ``where`` and
                it).
        """
        return cls.of_counts(**json_files.counts(content, cls.COUNT_NAMES, where, required=True))


def _ratio(part: int, whole: int) -> float:
    return part / whole if whole else json_files.NAN


def construction_counts(
    event: Event, graph: Data, pt_min: float, pt_max: float | None = None
) -> ConstructionMetrics:
    """Target doublets of ``event`` and how many ``graph`` holds, in all and on the beam line.

    Args:
        event: The event the graph was built from (hits, truth, particles).
        graph: Its graph: ``hit_id`` (N,) of each node, ``edge_index`` (2, E).
        pt_min: Target particles have pT > ``pt_min`` [GeV].
        pt_max: And pT <= ``pt_max`` when given.

    Returns:
        The counts and their efficiencies.
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
    return ConstructionMetrics.of_counts(
        target_doublets=len(pairs),
        held=int(held.sum()),
        beam_line_target_doublets=int(beam_line.sum()),
        beam_line_held=int((held & beam_line).sum()),
    )


def construction_summary(rows: list[ConstructionMetrics]) -> ConstructionMetrics | None:
    """Events' construction figures combined: counts summed, efficiencies recomputed
    (``None``: no event)."""
    if not rows:
        return None
    return ConstructionMetrics.of_counts(
        **{
            name: sum(getattr(row, name) for row in rows)
            for name in ConstructionMetrics.COUNT_NAMES
        }
    )
