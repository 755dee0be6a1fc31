"""The construction efficiency: an event's target doublets that its graph holds."""

from __future__ import annotations

import math

import torch

from partgnn.data.detector.geometry import default_geometry
from partgnn.data.graphs.graph_builder import GraphBuildConfig, build_event_graph
from partgnn.metrics.construction import (
    ConstructionMetrics,
    construction_counts,
    construction_summary,
)
from tests.conftest import make_tiny_event

# The tiny event's two particles have pT 1.0 GeV and 4 hits each: 3 doublets each.
PT_MIN = 0.5


def _graph(event):
    graph, _ = build_event_graph(event, default_geometry(), GraphBuildConfig())
    return graph


def _without_edges(graph, hit_pairs: list[tuple[int, int]]):
    """The graph less the edges joining the given hit ids (either direction)."""
    hit_id = graph.hit_id
    src, dst = hit_id[graph.edge_index[0]], hit_id[graph.edge_index[1]]
    keep = torch.ones(src.shape[0], dtype=torch.bool)
    for a, b in hit_pairs:
        keep &= ~(((src == a) & (dst == b)) | ((src == b) & (dst == a)))
    graph = graph.clone()
    graph.edge_index = graph.edge_index[:, keep]
    return graph


def test_a_graph_holding_every_true_pair_has_efficiency_one():
    event = make_tiny_event()
    counts = construction_counts(event, _graph(event), PT_MIN)
    assert counts == ConstructionMetrics.of_counts(
        target_doublets=6, held=6, beam_line_target_doublets=6, beam_line_held=6
    )
    assert construction_summary([counts]).efficiency == 1.0


def test_a_missing_edge_is_a_lost_doublet_whichever_its_direction():
    event = make_tiny_event()
    graph = _graph(event)
    reversed_graph = graph.clone()
    reversed_graph.edge_index = graph.edge_index.flip(0)
    assert construction_counts(event, reversed_graph, PT_MIN).held == 6
    # hits 2 and 3: particle 1's second and third layers; hit 6 and 7: particle 2's
    counts = construction_counts(event, _without_edges(graph, [(2, 3), (7, 6)]), PT_MIN)
    assert counts.held == 4
    assert construction_summary([counts]).efficiency == 4 / 6


def test_hits_the_graph_dropped_count_as_lost():
    event = make_tiny_event()
    graph = _graph(event)
    # drop particle 1's first hit (hit id 1): its doublet with hit 2 is gone
    keep = graph.hit_id != 1
    index = torch.full((graph.num_nodes,), -1, dtype=torch.long)
    index[keep] = torch.arange(int(keep.sum()))
    edges = graph.edge_index[:, keep[graph.edge_index[0]] & keep[graph.edge_index[1]]]
    dropped = graph.clone()
    dropped.hit_id, dropped.edge_index = graph.hit_id[keep], index[edges]
    assert construction_counts(event, dropped, PT_MIN).held == 5


def test_targets_follow_pt_hit_count_and_production_vertex():
    event = make_tiny_event()
    graph = _graph(event)
    assert construction_counts(event, graph, 1.5).target_doublets == 0
    assert math.isnan(construction_summary([construction_counts(event, graph, 1.5)]).efficiency)
    assert construction_counts(event, graph, 0.5, pt_max=0.9).target_doublets == 0
    # particle 2 made 5 mm from the beam line: a target, but not a beam-line one
    displaced = make_tiny_event()
    displaced.particles.loc[displaced.particles["particle_id"] == 2, "vx"] = 5.0
    counts = construction_counts(displaced, graph, PT_MIN)
    assert counts.target_doublets == 6
    assert (counts.beam_line_target_doublets, counts.beam_line_held) == (3, 3)
    # particle 2 left with 2 hits (its others turned into noise): not a target
    short = make_tiny_event()
    short.truth.loc[short.truth["hit_id"].isin([7, 8]), "particle_id"] = 0
    assert construction_counts(short, graph, PT_MIN).target_doublets == 3


def test_counts_add_over_events():
    event = make_tiny_event()
    full = construction_counts(event, _graph(event), PT_MIN)
    partial = construction_counts(event, _without_edges(_graph(event), [(1, 2)]), PT_MIN)
    summary = construction_summary([full, partial])
    assert (summary.target_doublets, summary.held) == (12, 11)
    assert summary.efficiency == 11 / 12
    assert construction_summary([]) is None
