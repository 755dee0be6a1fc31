"""Tests of partgnn.metrics.tracks: track building and double-majority track metrics."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
import torch

from partgnn.data.detector.geometry import default_geometry
from partgnn.data.graphs.graph_builder import GraphBuildConfig, build_event_graph
from partgnn.data.simulation.simulate import SimulationConfig, simulate_event
from partgnn.errors import InputError
from partgnn.metrics.track_building import NO_TRACK, build_tracks
from partgnn.metrics.tracks import TrackMetrics, track_metrics

METHODS = ("components", "walk", "junction")


def edges(*pairs: tuple[int, int]) -> np.ndarray:
    """Edge index (2, E) from ``(source, target)`` pairs."""
    return np.array(pairs, dtype=np.int64).T.reshape(2, -1)


# --- build_tracks ---------------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_two_chains_are_two_tracks(method: str) -> None:
    edge_index = edges((0, 1), (1, 2), (3, 4), (4, 5))
    labels = build_tracks(edge_index, np.full(4, 0.9), 6, method=method)
    assert labels.dtype == np.int64
    assert labels.tolist() == [0, 0, 0, 1, 1, 1]


@pytest.mark.parametrize("method", METHODS)
def test_isolated_nodes_and_rejected_edges_give_no_track(method: str) -> None:
    # Node 6 has no edge at all; edge 2 -> 3 is below the cut, and 4 -> 5 exactly at it.
    edge_index = edges((0, 1), (1, 2), (2, 3), (4, 5))
    labels = build_tracks(edge_index, np.array([0.9, 0.8, 0.3, 0.5]), 7, cut=0.5, method=method)
    assert labels.tolist() == [0, 0, 0, NO_TRACK, NO_TRACK, NO_TRACK, NO_TRACK]


@pytest.mark.parametrize("method", METHODS)
def test_cut_threshold_moves_hits_in_and_out(method: str) -> None:
    edge_index = edges((0, 1), (1, 2), (2, 3))
    scores = np.array([0.9, 0.6, 0.2])
    assert build_tracks(edge_index, scores, 4, cut=0.1, method=method).tolist() == [0, 0, 0, 0]
    assert build_tracks(edge_index, scores, 4, cut=0.5, method=method).tolist() == [0, 0, 0, -1]
    assert build_tracks(edge_index, scores, 4, cut=0.7, method=method).tolist() == [0, 0, -1, -1]
    assert build_tracks(edge_index, scores, 4, cut=0.95, method=method).tolist() == [-1] * 4


@pytest.mark.parametrize("method", METHODS)
def test_labels_follow_the_lowest_hit_of_each_track(method: str) -> None:
    edge_index = edges((3, 4), (0, 5))
    labels = build_tracks(edge_index, np.ones(2), 6, method=method)
    assert labels.tolist() == [0, -1, -1, 1, 1, 0]


def test_fork_joins_components_and_is_resolved_by_the_walk() -> None:
    # 0 forks to 1 (0.9) and 2 (0.6); both branches continue outwards.
    edge_index = edges((0, 1), (0, 2), (1, 3), (2, 4))
    scores = np.array([0.9, 0.6, 0.9, 0.9])
    assert build_tracks(edge_index, scores, 5).tolist() == [0, 0, 0, 0, 0]
    # The walk keeps the best branch; the losing branch starts a track of its own.
    assert build_tracks(edge_index, scores, 5, method="walk").tolist() == [0, 0, 1, 0, 1]


def test_walk_gives_a_merge_node_to_the_best_predecessor() -> None:
    # 0 and 1 both continue to 2; 1 -> 2 scores higher, so 0's walk ends before 2.
    edge_index = edges((0, 2), (1, 2), (2, 3))
    scores = np.array([0.7, 0.9, 0.8])
    assert build_tracks(edge_index, scores, 4).tolist() == [0, 0, 0, 0]
    assert build_tracks(edge_index, scores, 4, method="walk").tolist() == [-1, 0, 0, 0]


def test_junction_removal_cuts_the_weak_edges_of_forks_and_merges() -> None:
    # A chain 0-1-2-3; 1 also forks to 4 (weaker) and 5 also merges into 2 (weaker).
    edge_index = edges((0, 1), (1, 2), (2, 3), (1, 4), (5, 2))
    scores = np.array([0.9, 0.9, 0.9, 0.6, 0.7])
    assert build_tracks(edge_index, scores, 6).tolist() == [0] * 6
    junction = build_tracks(edge_index, scores, 6, method="junction")
    assert junction.tolist() == [0, 0, 0, 0, -1, -1]


def test_junction_removal_judges_both_ends_on_all_accepted_edges() -> None:
    # A=0 goes to C=2 (0.9) and better to E=3 (0.95); B=1 goes only to C (0.8). The walk lets
    # B keep C (A chose E); junction removal cuts B -> C, since A -> C is C's best incoming.
    edge_index = edges((0, 2), (0, 3), (1, 2))
    scores = np.array([0.9, 0.95, 0.8])
    assert build_tracks(edge_index, scores, 4, method="walk").tolist() == [0, 1, 1, 0]
    assert build_tracks(edge_index, scores, 4, method="junction").tolist() == [0, -1, -1, 0]


def test_junction_removal_keeps_the_ladder_of_double_hits_together() -> None:
    # 0 -> the double hits {1, 2} of one layer -> 3 -> the double hits {4, 5} -> 6: twins share
    # a predecessor and a successor. Node 7 forks off 3 more weakly: a junction, cut.
    edge_index = edges((0, 1), (0, 2), (1, 3), (2, 3), (3, 4), (3, 5), (4, 6), (5, 6), (3, 7))
    scores = np.array([0.9, 0.8, 0.95, 0.7, 0.9, 0.9, 0.8, 0.9, 0.6])
    assert build_tracks(edge_index, scores, 8, method="junction").tolist() == [0] * 7 + [-1]
    # The walk follows one hit of each pair: the others start tracks of their own.
    walk = build_tracks(edge_index, scores, 8, method="walk")
    assert len(set(walk.tolist()) - {-1}) > 1


def test_walk_follows_the_best_edge_not_the_first() -> None:
    # A wrong edge 0 -> 4 outscores the true 0 -> 1; the rest of the chain 1-2-3 still forms
    # a track instead of being orphaned.
    edge_index = edges((0, 1), (1, 2), (2, 3), (0, 4))
    scores = np.array([0.8, 0.9, 0.9, 0.95])
    assert build_tracks(edge_index, scores, 5, method="walk").tolist() == [0, 1, 1, 1, 0]


def test_walk_breaks_equal_scores_by_edge_order() -> None:
    edge_index = edges((0, 2), (0, 1))
    labels = build_tracks(edge_index, np.array([0.8, 0.8]), 3, method="walk")
    assert labels.tolist() == [0, -1, 0]


def reference_walk(edge_index: np.ndarray, scores: np.ndarray, n: int, cut: float) -> list[set]:
    """The walk-through of :func:`build_tracks` written as plain loops: its tracks as sets."""
    successor: dict[int, tuple[float, int, int]] = {}  # hit -> (score, -edge id, target)
    for e, (u, v) in enumerate(edge_index.T.tolist()):
        if scores[e] > cut and (scores[e], -e, v) > successor.get(u, (-1.0, 0, -1)):
            successor[u] = (scores[e], -e, v)
    predecessor: dict[int, tuple[float, int, int]] = {}  # hit -> the best hit choosing it
    for u, (score, neg_e, v) in successor.items():
        if (score, neg_e, u) > predecessor.get(v, (-1.0, 0, -1)):
            predecessor[v] = (score, neg_e, u)
    tracks = []
    for seed in range(n):
        if seed in predecessor:
            continue
        track, hit = [seed], seed
        while hit in successor and predecessor[successor[hit][2]][2] == hit:
            hit = successor[hit][2]
            track.append(hit)
        if len(track) >= 2:
            tracks.append(set(track))
    return tracks


def test_walk_matches_a_loop_reference_on_a_random_graph() -> None:
    rng = np.random.default_rng(0)
    n = 300
    edge_index = rng.integers(0, n, (2, 3000))
    edge_index = edge_index[:, edge_index[0] < edge_index[1]]  # inner -> outer: acyclic
    scores = rng.random(edge_index.shape[1]).round(1)  # coarse scores: many ties
    labels = build_tracks(edge_index, scores, n, cut=0.6, method="walk")
    tracks = [set(np.flatnonzero(labels == t).tolist()) for t in range(labels.max() + 1)]
    expected = reference_walk(edge_index, scores, n, cut=0.6)
    assert len(tracks) > 10
    assert sorted(map(sorted, tracks)) == sorted(map(sorted, expected))


def test_build_tracks_accepts_torch_tensors() -> None:
    edge_index = torch.tensor([[0, 1], [1, 2]])
    scores = torch.tensor([0.9, 0.9])
    for method in METHODS:
        assert build_tracks(edge_index, scores, 3, method=method).tolist() == [0, 0, 0]


def test_build_tracks_on_an_empty_graph() -> None:
    labels = build_tracks(np.zeros((2, 0), dtype=np.int64), np.zeros(0), 3, method="walk")
    assert labels.tolist() == [-1, -1, -1]


@pytest.mark.parametrize(
    ("edge_index", "scores", "n_nodes", "method", "message"),
    [
        (edges((0, 1)), np.ones(1), 2, "louvain", "method must be one of"),
        (np.zeros((3, 1), dtype=np.int64), np.ones(1), 2, "components", "shape \\(2, E\\)"),
        (edges((0, 1)), np.ones(2), 2, "components", "scores must have shape \\(1,\\)"),
        (edges((0, 2)), np.ones(1), 2, "components", "outside \\[0, 2\\)"),
    ],
)
def test_build_tracks_rejects_bad_input(
    edge_index: np.ndarray, scores: np.ndarray, n_nodes: int, method: str, message: str
) -> None:
    with pytest.raises(InputError, match=message):
        build_tracks(edge_index, scores, n_nodes, method=method)  # type: ignore[arg-type]


# --- track_metrics on a hand-made event -----------------------------------------------------

# Each group: (particle, pT [GeV], track label, number of hits). The answers are worked out in
# the comments and in HAND_MADE_EXPECTED below.
HAND_MADE = [
    (1, 2.0, 0, 4),  # perfect track: matched
    (2, 2.0, 1, 3),  # p2 split 3 + 3: each half has exactly 50% of p2, so neither matches
    (2, 2.0, 2, 3),
    (3, 2.0, 3, 4),  # p3 split 4 + 3: 4/7 > 50% matches; the pure 3-hit piece is a duplicate
    (3, 2.0, 4, 3),
    (4, 2.0, 5, 4),  # p4 + p5 merged, 4 + 4: exactly 50% of the track each, no match
    (5, 2.0, 5, 4),
    (6, 2.0, 6, 4),  # p6 plus one hit of p7: 4/5 of the track, all of p6: matched
    (7, 2.0, 6, 1),
    (7, 2.0, -1, 2),  # the rest of p7 unassigned: p7 (a target) is not reconstructed
    (0, 0.0, 7, 3),  # a track of noise: fake
    (8, 0.5, 8, 3),  # matched, but below the pT cut: not a target
    (9, 2.0, 9, 2),  # 2 hits: neither a candidate track nor a target particle
    (0, 0.0, -1, 2),  # unassigned noise
]

HAND_MADE_EXPECTED = {
    "n_target_particles": 7,  # p1 .. p7
    "n_reconstructed_targets": 3,  # p1, p3, p6
    "n_tracks": 9,  # labels 0 .. 8
    "n_matched_tracks": 4,  # labels 0, 3, 6, 8
    "n_fake_tracks": 5,  # labels 1, 2, 4, 5, 7
    "n_duplicate_tracks": 1,  # label 4
}


def hand_made_event() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-hit ``(labels, particle_id, particle_pt)`` of :data:`HAND_MADE`, hits shuffled."""
    particle, pt, label = (
        np.repeat([row[k] for row in HAND_MADE], [row[3] for row in HAND_MADE]) for k in range(3)
    )
    order = np.random.default_rng(1).permutation(len(particle))  # order must not matter
    return label[order].astype(np.int64), particle[order].astype(np.int64), pt[order]


def test_track_metrics_on_a_hand_made_event() -> None:
    labels, particle_id, particle_pt = hand_made_event()
    metrics = track_metrics(labels, particle_id, particle_pt=particle_pt)
    assert {k: getattr(metrics, k) for k in HAND_MADE_EXPECTED} == HAND_MADE_EXPECTED
    assert metrics.efficiency == pytest.approx(3 / 7)
    assert metrics.fake_rate == pytest.approx(5 / 9)
    assert metrics.duplicate_rate == pytest.approx(1 / 5)
    assert metrics.trackml_score is None


def test_track_metrics_accepts_torch_tensors() -> None:
    labels, particle_id, particle_pt = hand_made_event()
    from_torch = track_metrics(
        torch.from_numpy(labels),
        torch.from_numpy(particle_id),
        particle_pt=torch.from_numpy(particle_pt.astype(np.float32)),
    )
    assert from_torch == track_metrics(labels, particle_id, particle_pt=particle_pt)


def test_double_majority_boundary_of_the_particle_side() -> None:
    # A 4-hit track of particle 1, which has 8 (exactly 50%) or 7 (57%) hits in the event.
    labels = np.array([0, 0, 0, 0])
    particle_id = np.array([1, 1, 1, 1])
    for n_hits, reconstructed in ((8, 0), (7, 1)):
        metrics = track_metrics(labels, particle_id, particle_n_hits={1: n_hits})
        assert metrics.n_reconstructed_targets == reconstructed
        assert metrics.n_matched_tracks == reconstructed


def test_double_majority_boundary_of_the_track_side() -> None:
    # Tracks of 6 hits holding 3 (50%) or 4 (67%) hits of particle 1 (all of its hits).
    for n_own, matched in ((3, 0), (4, 1)):
        particle_id = np.array([1] * n_own + [2] * (6 - n_own))
        metrics = track_metrics(np.zeros(6, dtype=np.int64), particle_id, particle_n_hits={2: 20})
        assert metrics.n_matched_tracks == matched
        assert metrics.n_fake_tracks == 1 - matched


def test_target_selection_by_pt_and_hit_count() -> None:
    particle_id = np.array([1, 1, 1, 2, 2, 2, 3, 3, 4, 4, 4, 0, 0, 0])
    particle_pt = np.array([1.5] * 3 + [1.0] * 3 + [3.0] * 2 + [0.9] * 3 + [0.0] * 3)
    labels = np.full(len(particle_id), -1)
    # p1 is a target; p2 sits exactly at the cut (pT > pt_min is strict); p3 has 2 hits;
    # p4 is too soft; noise never is a target.
    metrics = track_metrics(labels, particle_id, particle_pt=particle_pt)
    assert metrics.n_target_particles == 1
    assert (
        track_metrics(labels, particle_id, particle_pt=particle_pt, pt_min=0.5).n_target_particles
        == 3
    )
    assert (
        track_metrics(labels, particle_id, particle_pt=particle_pt, min_hits=2).n_target_particles
        == 2
    )
    # Without pT every non-noise particle with enough hits is a target.
    assert track_metrics(labels, particle_id).n_target_particles == 3
    # The event's hit count (e.g. the particles table) can make p3 a target, never noise.
    hit_counts = {3: 5, 0: 100}
    with_counts = track_metrics(
        labels, particle_id, particle_pt=particle_pt, particle_n_hits=hit_counts
    )
    assert with_counts.n_target_particles == 2


@pytest.mark.parametrize(
    "hit_counts",
    [
        {1: 10, 2: 3},
        pd.Series([10, 3], index=pd.Index([1, 2], name="particle_id")),
        (np.array([2, 1]), np.array([3, 10])),
        (torch.tensor([2, 1]), torch.tensor([3, 10])),
    ],
)
def test_particle_hit_counts_in_every_accepted_form(hit_counts: object) -> None:
    # p1 left 10 hits in the event but only 4 are in the graph: its 4-hit track is not a match.
    labels = np.array([0, 0, 0, 0, 1, 1, 1])
    particle_id = np.array([1, 1, 1, 1, 2, 2, 2])
    metrics = track_metrics(labels, particle_id, particle_n_hits=hit_counts)  # type: ignore[arg-type]
    assert (metrics.n_target_particles, metrics.n_reconstructed_targets) == (2, 1)


def test_hit_counts_never_fall_below_the_hits_present() -> None:
    labels = np.array([0, 0, 0, 0, 0])
    particle_id = np.array([1, 1, 1, 1, 1])
    # A count of 2 is inconsistent with 5 hits present; the 5 present hits are used.
    metrics = track_metrics(labels, particle_id, particle_n_hits={1: 2})
    assert metrics.n_reconstructed_targets == 1


def test_small_tracks_are_not_candidates() -> None:
    labels = np.array([0, 0, 1, 1, 1])
    particle_id = np.array([1, 1, 2, 2, 2])
    metrics = track_metrics(labels, particle_id, min_hits=3)
    assert (metrics.n_tracks, metrics.n_matched_tracks, metrics.n_reconstructed_targets) == (
        1,
        1,
        1,
    )
    assert track_metrics(labels, particle_id, min_hits=2).n_tracks == 2


def test_empty_event_gives_nan_rates() -> None:
    empty = np.zeros(0, dtype=np.int64)
    metrics = track_metrics(empty, empty, hit_weight=np.zeros(0))
    assert (metrics.n_tracks, metrics.n_target_particles) == (0, 0)
    assert math.isnan(metrics.efficiency) and math.isnan(metrics.fake_rate)
    assert math.isnan(metrics.duplicate_rate)
    assert metrics.trackml_score == 0.0


def test_track_metrics_rejects_bad_input() -> None:
    with pytest.raises(InputError, match="particle_id has 2 values for 3 hits"):
        track_metrics(np.zeros(3), np.zeros(2))
    with pytest.raises(InputError, match="hit_weight has 1 values for 3 hits"):
        track_metrics(np.zeros(3), np.zeros(3), hit_weight=np.zeros(1))
    with pytest.raises(InputError, match="min_hits must be >= 1"):
        track_metrics(np.zeros(3), np.zeros(3), min_hits=0)
    with pytest.raises(InputError, match="particle_n_hits must be"):
        track_metrics(np.zeros(3), np.zeros(3), particle_n_hits=[1, 2, 3])  # type: ignore[arg-type]


# --- TrackML score --------------------------------------------------------------------------


def test_trackml_score_is_one_for_perfect_tracks() -> None:
    rng = np.random.default_rng(2)
    particle_id = rng.integers(0, 50, 1000)
    weight = np.where(particle_id > 0, rng.random(1000), 0.0)
    weight /= weight.sum()
    labels = np.where(particle_id > 0, particle_id, -1)
    assert track_metrics(labels, particle_id, hit_weight=weight).trackml_score == pytest.approx(1.0)
    # Relabelling tracks changes nothing; putting the noise into one track changes nothing.
    shuffled = rng.permutation(100)[labels]
    assert track_metrics(shuffled, particle_id, hit_weight=weight).trackml_score == pytest.approx(
        1.0
    )
    assert track_metrics(
        particle_id, particle_id, hit_weight=weight
    ).trackml_score == pytest.approx(1.0)


def test_trackml_score_by_hand() -> None:
    labels, particle_id, particle_pt = hand_made_event()
    # Uniform weights over the 37 signal hits. Counted tracks: label 0 (4 hits of p1), 3 (4 of
    # p3), 6 (the 4 p6 hits, not the p7 hit), 8 (3 of p8) and 9 (2 of p9: the score has no
    # size cut); the split halves of p2 and the merged p4 + p5 do not count.
    weight = np.where(particle_id > 0, 1.0 / 37, 0.0)
    metrics = track_metrics(labels, particle_id, particle_pt=particle_pt, hit_weight=weight)
    assert metrics.trackml_score == pytest.approx(17 / 37)
    # Weights are per hit, not per particle: doubling p3's hit weights adds 4/37 more.
    heavier = np.where(particle_id == 3, 2 * weight, weight)
    metrics = track_metrics(labels, particle_id, particle_pt=particle_pt, hit_weight=heavier)
    assert metrics.trackml_score == pytest.approx(21 / 37)
    assert metrics.trackml_score_max == pytest.approx(heavier.sum())  # the hits' weight


def test_the_trackml_score_of_a_subsample_is_said_to_be_bounded_by_its_weight(capsys) -> None:
    """Half of an event's hit weight in the graph: the printed score says it is out of 0.5."""
    from partgnn.cli.eval_commands import _print_metrics
    from partgnn.metrics.edge_metrics import EdgeMetrics
    from partgnn.metrics.evaluation_results import EvaluationResults

    labels, particle_id, particle_pt = hand_made_event()
    weight = np.where(particle_id > 0, 0.5 / 37, 0.0)
    metrics = track_metrics(labels, particle_id, particle_pt=particle_pt, hit_weight=weight)
    assert metrics.trackml_score_max == pytest.approx(0.5)
    results = EvaluationResults(
        edge=EdgeMetrics(), track=metrics, target_pt=(1.0, None), events=1, cut=0.5,
        cut_source="given", track_building="components",
    )  # fmt: skip
    _print_metrics(results)
    line = next(x for x in capsys.readouterr().out.splitlines() if "trackml_score " in x)
    assert "(of at most 0.5000: these graphs hold part of each event's hits" in line


# --- combining events ----------------------------------------------------------------------


def test_combine_sums_counts_and_averages_scores() -> None:
    a = TrackMetrics.from_counts(
        n_target_particles=10,
        n_reconstructed_targets=9,
        n_tracks=12,
        n_matched_tracks=10,
        n_duplicate_tracks=1,
        trackml_score=0.8,
    )
    b = TrackMetrics.from_counts(
        n_target_particles=0,
        n_reconstructed_targets=0,
        n_tracks=3,
        n_matched_tracks=2,
        n_duplicate_tracks=0,
        trackml_score=0.6,
    )
    both = TrackMetrics.combine([a, b])
    assert both.efficiency == pytest.approx(0.9)
    assert both.fake_rate == pytest.approx(3 / 15)
    assert both.duplicate_rate == pytest.approx(1 / 13)
    assert both.trackml_score == pytest.approx(0.7)
    assert set(both.to_dict()) >= {"efficiency", "fake_rate", "duplicate_rate", "trackml_score"}
    assert (
        TrackMetrics.combine([a, dataclasses.replace(b, trackml_score=None)]).trackml_score is None
    )


def test_atlas_and_one_way_matching_beside_double_majority() -> None:
    # Particle 1 (5 hits): track 0 holds 2 of them and 1 hit of particle 3: the track is 2/3
    # particle 1 (ATLAS-matched), but holds 2/5 of the particle (not one-way, not double
    # majority). Particle 2 (4 hits): track 1 holds all 4 and the 4 hits of particle 4
    # (below 1 GeV): 4/8 of the track is no majority (not ATLAS, and the track is impure), 4/4
    # of the particle is one-way. Particle 3 (4 hits): track 2 is 3 of them (every match).
    particle = [1, 1, 3, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 4, 3, 3, 3]
    labels = [0, 0, 0, -1, -1, -1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2]
    pt = [2.0] * 10 + [0.5] * 4 + [2.0] * 3
    metrics = track_metrics(labels, particle, particle_pt=pt, min_hits=3)
    assert metrics.n_target_particles == 3 and metrics.n_tracks == 3
    assert metrics.n_reconstructed_targets == 1  # double majority: particle 3
    assert metrics.n_reconstructed_atlas == 2  # particles 1 and 3
    assert metrics.n_reconstructed_one_way == 2  # particles 2 and 3
    assert metrics.efficiency_atlas == pytest.approx(2 / 3)
    assert metrics.impure_rate == pytest.approx(1 / 3)  # track 1
    combined = TrackMetrics.combine([metrics, metrics])
    assert combined.n_reconstructed_atlas == 4
    assert combined.efficiency_one_way == pytest.approx(2 / 3)


# --- event size and end to end ----------------------------------------------------------------


def test_an_event_sized_graph_builds_and_scores() -> None:
    # Its speed is a benchmark (tools/bench_tracks.py), not a test.
    rng = np.random.default_rng(3)
    n_hits, n_edges = 100_000, 1_000_000
    particle_id = rng.integers(0, 10_000, n_hits)
    particle_pt = rng.exponential(1.0, 10_000)[particle_id]
    weight = rng.random(n_hits)
    edge_index = rng.integers(0, n_hits, (2, n_edges))
    scores = rng.random(n_edges)
    for method in METHODS:
        labels = build_tracks(edge_index, scores, n_hits, cut=0.999, method=method)
        assert labels.shape == (n_hits,), method
        metrics = track_metrics(labels, particle_id, particle_pt=particle_pt, hit_weight=weight)
        assert 0.0 <= metrics.efficiency <= 1.0, method
    # Mostly right labels: 90% of hits on their particle's track.
    labels = np.where(rng.random(n_hits) < 0.9, particle_id, -1)
    metrics = track_metrics(labels, particle_id, particle_pt=particle_pt, hit_weight=weight)
    assert metrics.efficiency > 0.9


@pytest.mark.parametrize("method", METHODS)
def test_truth_scores_reconstruct_simulated_tracks(method: str) -> None:
    geometry = default_geometry()
    event = simulate_event(geometry, SimulationConfig(pileup=20), event_id=0, seed=3)
    data, _ = build_event_graph(event, geometry, GraphBuildConfig(pt_min=1.0))
    labels = build_tracks(data.edge_index, data.y, data.num_nodes, method=method)
    truth = event.truth.set_index("hit_id")
    metrics = track_metrics(
        labels,
        data.particle_id,
        particle_pt=data.particle_pt,
        hit_weight=truth["weight"].reindex(data.hit_id.numpy()).to_numpy(),
        particle_n_hits=event.particles.set_index("particle_id")["nhits"],
    )
    print(f"truth-score tracks ({method}): {metrics.to_dict()}")
    assert metrics.n_target_particles > 50
    # Hits on overlapping modules (module planes) make branches, of which a walk takes one: it
    # keeps fewer hits than double majority asks of some tracks (0.86 here; ATLAS 0.98).
    assert metrics.efficiency >= (0.85 if method == "walk" else 0.9), metrics
    assert metrics.efficiency_atlas >= 0.95, metrics
    # The graph holds only the hits of pT > 1 GeV particles, so the score is out of their weight.
    assert 0 < metrics.trackml_score <= truth["weight"].sum()


def test_impure_tracks_are_those_no_particle_dominates():
    # Track 0: particle 1 (3 hits) -> matched. Track 1: particle 2's 3 of 7 hits -> a pure
    # fragment: fake under double majority, not impure. Track 2: 2 + 1 + 1 hits of particles
    # 3, 4, 5 -> no majority: impure (and fake).
    labels = [0, 0, 0, 1, 1, 1, -1, -1, -1, -1, 2, 2, 2, 2]
    particle_id = [1, 1, 1] + [2] * 7 + [3, 3, 4, 5]
    metrics = track_metrics(labels, particle_id, min_hits=3)
    assert (metrics.n_tracks, metrics.n_fake_tracks, metrics.n_impure_tracks) == (3, 2, 1)
    assert metrics.impure_rate == pytest.approx(1 / 3)
    combined = TrackMetrics.combine([metrics, metrics])
    assert combined.n_impure_tracks == 2 and combined.impure_rate == pytest.approx(1 / 3)


def test_spanning_and_contained_efficiency_on_a_hand_made_event() -> None:
    # Particle 1: 4 hits in sector 0, found. Particle 2: 2 hits in sector 0 and 2 in sector 1,
    # split at the boundary into two 2-hit pieces (neither holds > 50 % of its hits): lost.
    # Particle 3: 3 hits in sector 1, found. Particle 4: 3 hits across both sectors, found.
    particle_id = np.array([1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 4, 4, 4])
    hit_sector = np.array([0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 1, 1])
    labels = np.array([0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 3, 4, 4, 4])
    metrics = track_metrics(labels, particle_id, hit_sector=hit_sector)
    assert metrics.split_by_sector
    assert (metrics.n_spanning_targets, metrics.n_reconstructed_spanning) == (2, 1)
    assert metrics.spanning_efficiency == pytest.approx(0.5)
    assert metrics.contained_efficiency == pytest.approx(1.0)
    assert metrics.efficiency == pytest.approx(0.75)
    # Counts add over events; one event without sectors makes the split unknown.
    twice = TrackMetrics.combine([metrics, metrics])
    assert (twice.n_spanning_targets, twice.spanning_efficiency) == (4, 0.5)
    plain = track_metrics(labels, particle_id)
    assert not plain.split_by_sector and np.isnan(plain.spanning_efficiency)
    mixed = TrackMetrics.combine([metrics, plain])
    assert not mixed.split_by_sector and np.isnan(mixed.contained_efficiency)
    with pytest.raises(InputError, match="hit_sector has 3 values for 14 hits"):
        track_metrics(labels, particle_id, hit_sector=hit_sector[:3])


def test_a_pt_band_selects_its_targets() -> None:
    """Three 3-hit particles of pT 0.3, 0.7 and 1.5 GeV; only the 0.7 GeV one is found."""
    particle_id = np.repeat([1, 2, 3], 3)
    particle_pt = np.repeat([0.3, 0.7, 1.5], 3)
    labels = np.array([NO_TRACK] * 3 + [5] * 3 + [NO_TRACK] * 3)

    def efficiency(pt_min: float, pt_max: float | None) -> tuple[int, float]:
        metrics = track_metrics(labels, particle_id, particle_pt=particle_pt, pt_min=pt_min,
                                pt_max=pt_max)  # fmt: skip
        return metrics.n_target_particles, metrics.efficiency

    assert efficiency(0.5, 1.0) == (1, 1.0)
    assert efficiency(1.0, None) == (1, 0.0)
    assert efficiency(0.0, 1.0) == (2, 0.5)
    assert efficiency(0.0, None) == (3, 1 / 3)
