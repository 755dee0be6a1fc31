"""Evaluation of a scores file against its graphs and events files."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from partgnn.data.detector.geometry import default_geometry
from partgnn.data.files.h5_files import file_sha256
from partgnn.data.files.storage import ScoresFile
from partgnn.data.files.writers import write_events, write_graphs, write_scores
from partgnn.data.graphs.graph_builder import GraphBuildConfig, build_event_graph
from partgnn.errors import InputError
from partgnn.metrics.evaluation import evaluate_scores
from tests.conftest import make_tiny_event


def _write_files(tmp_path: Path, nhits: int) -> tuple[Path, Path, Path]:
    """The tiny event (2 particles x 4 pixel-barrel hits) whose ``nhits`` says ``nhits``,
    its graph, and perfect scores (score = truth)."""
    event = make_tiny_event()
    event.particles["nhits"] = nhits
    events_path, graphs_path = tmp_path / "events.h5", tmp_path / "graphs.h5"
    write_events(events_path, [event])
    graph, quality = build_event_graph(event, default_geometry(), GraphBuildConfig())
    assert int(graph.y.sum()) == 6  # 3 consecutive pairs per particle
    write_graphs(graphs_path, [(graph, quality.to_dict())])
    scores_path = tmp_path / "scores.h5"
    write_scores(
        scores_path,
        [(event.event_id, graph.y.numpy())],
        provenance={"source_sha256": file_sha256(graphs_path)},
    )
    return scores_path, graphs_path, events_path


@pytest.mark.parametrize("nhits", [4, 20])
def test_perfect_scores_on_a_subsampled_event_give_efficiency_one(tmp_path: Path, nhits: int):
    # nhits = 20: the event is a subsample (only the pixel barrel kept) and the particles
    # table still counts each particle's hits in the whole original event. Track metrics count
    # the hits the event holds, so the two 4-hit tracks are found either way.
    scores, graphs, events = _write_files(tmp_path, nhits)
    result = evaluate_scores(scores, graphs, events_path=events, pt_min=0.5)
    track = result.track
    assert track.n_target_particles == 2
    assert track.efficiency == 1.0
    assert track.fake_rate == 0.0
    assert track.trackml_score == pytest.approx(1.0)
    assert result.edge.efficiency == 1.0 and result.edge.purity == 1.0
    assert result.target_pt == (0.5, None)
    # A band above every particle's pT: no targets, no target edges.
    band = evaluate_scores(scores, graphs, events_path=events, pt_min=1e6, pt_max=2e6)
    assert band.track.n_target_particles == 0
    assert math.isnan(band.edge.target_efficiency)
    # An empty band (pt_max <= pt_min) selects nothing by construction: refused, not n/a.
    for pt_min, pt_max in ((2.0, 1.0), (1.0, 1.0)):
        with pytest.raises(InputError, match=rf"--pt-max {pt_max:g} is not above --pt-min"):
            evaluate_scores(scores, graphs, events_path=events, pt_min=pt_min, pt_max=pt_max)


def test_evaluate_uses_the_cut_recorded_with_the_scores(tmp_path: Path):
    scores, graphs, _ = _write_files(tmp_path, 4)
    # Perfect truth, but every true edge scored 0.7: accepted at the default cut 0.5 only.
    with ScoresFile(scores) as stored:
        values = stored[0] * 0.7
    event_id = make_tiny_event().event_id
    for recorded, expected_efficiency in ((None, 1.0), (0.8, 0.0)):
        provenance = {"source_sha256": file_sha256(graphs)}
        if recorded is not None:
            provenance["score_cut"] = recorded
        write_scores(scores, [(event_id, values)], provenance=provenance)
        result = evaluate_scores(scores, graphs, pt_min=0.5)
        assert result.cut == (recorded or 0.5)
        assert result.cut_source == (
            "chosen in training" if recorded
            else "the default: the scores record no cut chosen in training"
        )  # fmt: skip
        assert result.edge.efficiency == expected_efficiency
    assert evaluate_scores(scores, graphs, cut=0.6, pt_min=0.5).edge.efficiency == 1.0


@pytest.mark.parametrize(("efficiency", "lowest_kept"), [(1.0, 0.4), (4 / 6, 0.6), (0.5, 0.7)])
def test_the_cut_chosen_for_a_target_efficiency(tmp_path: Path, efficiency, lowest_kept):
    scores, graphs, _ = _write_files(tmp_path, 4)
    with ScoresFile(scores) as stored:
        truth = stored[0]
    values = truth.copy()
    values[truth > 0.5] = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]  # the 6 target edges
    values[truth < 0.5] = 0.65  # false edges
    event_id = make_tiny_event().event_id
    write_scores(scores, [(event_id, values)], provenance={"source_sha256": file_sha256(graphs)})
    result = evaluate_scores(scores, graphs, pt_min=0.5, cut_at_efficiency=efficiency)
    cut = result.cut
    # The highest cut that keeps the fraction: just below the lowest target score kept.
    assert cut < lowest_kept and cut == pytest.approx(lowest_kept, abs=1e-6)
    assert result.edge.target_efficiency >= efficiency - 1e-12
    said = f"target edge efficiency {efficiency:g} on these events"
    if efficiency == 1.0:  # below every score: said (issue 67)
        said += "; it keeps every edge (the lowest score is 0.4): at this target the scores "
        said += "select nothing"
    assert result.cut_source == said
    higher = evaluate_scores(scores, graphs, pt_min=0.5, cut=lowest_kept)
    assert higher.edge.target_efficiency < efficiency
    with pytest.raises(InputError, match="no target edges"):
        evaluate_scores(scores, graphs, pt_min=1e6, cut_at_efficiency=0.99)


def _write_crossed_files(tmp_path: Path) -> tuple[Path, Path, int]:
    """The tiny event's graph with two false edges joining its two particles' hits (1 -> 6,
    2 -> 7): scores file and graphs file."""
    event = make_tiny_event()
    graph, quality = build_event_graph(event, default_geometry(), GraphBuildConfig())
    crossed = torch.tensor([[1, 2], [6, 7]])
    graph.edge_index = torch.cat([graph.edge_index, crossed], dim=1)
    graph.y = torch.cat([graph.y, torch.zeros(2)])
    graph.edge_attr = torch.cat([graph.edge_attr, graph.edge_attr[:2]])
    graph.edge_pt = torch.cat([graph.edge_pt, graph.edge_pt[:2]])
    graphs_path = tmp_path / "graphs.h5"
    write_graphs(graphs_path, [(graph, quality.to_dict())])
    return tmp_path / "scores.h5", graphs_path, event.event_id


@pytest.mark.parametrize(("track_building", "lowest"), [("components", 0.65), ("junction", 0.0)])
def test_the_cut_chosen_for_an_impure_track_rate(tmp_path: Path, track_building, lowest):
    scores, graphs, event_id = _write_crossed_files(tmp_path)

    def scored(false_score: float, true_score: float = 0.9) -> None:
        values = np.array([true_score] * 6 + [false_score] * 2, dtype=np.float32)
        write_scores(
            scores, [(event_id, values)], provenance={"source_sha256": file_sha256(graphs)}
        )

    def evaluated(**cut) -> dict:
        return evaluate_scores(scores, graphs, pt_min=0.5, track_building=track_building, **cut)

    scored(0.65)
    # Components join the two particles' hits into one impure track below the false edges'
    # score; junction removal cuts the junctions' weaker edges, so no cut leaves one impure.
    assert (evaluated(cut=0.5).track.impure_rate > 0) == (lowest > 0)
    result = evaluated(cut_at_impure_rate=0.0)
    assert lowest <= result.cut <= lowest + 2e-3
    assert result.track.impure_rate == 0.0
    # the rate reached beside the target; a cut below every score is said (issue 67)
    assert result.cut_source.startswith("impure track rate 0 (at most 0) on these events")
    keeps_all = "; it keeps every edge (the lowest score is 0.65): at this target the scores"
    assert (keeps_all in result.cut_source) == (lowest == 0.0), result.cut_source
    with pytest.raises(InputError, match=r"impure track rate must be in \[0, 1\)"):
        evaluated(cut_at_impure_rate=1.0)
    if track_building == "components":
        scored(1.0, true_score=1.0)  # no cut below 1 splits the impure track
        with pytest.raises(InputError, match=r"more than 0 impure even at cut 0\.999"):
            evaluated(cut_at_impure_rate=0.0)


def test_construction_is_counted_from_the_events_file_when_given(tmp_path: Path):
    scores_path, graphs_path, events_path = _write_files(tmp_path, nhits=4)
    assert evaluate_scores(scores_path, graphs_path, pt_min=0.5).construction is None
    construction = evaluate_scores(
        scores_path, graphs_path, events_path=events_path, pt_min=0.5
    ).construction
    assert (construction.target_doublets, construction.held) == (6, 6)
    assert construction.efficiency == construction.beam_line_efficiency == 1.0


@pytest.mark.parametrize(
    ("option", "value"), [("--cut-at-impure-rate", "1"), ("--cut-at-efficiency", "0")]
)
def test_a_target_no_cut_can_mean_is_a_usage_error(tmp_path: Path, capsys, option, value):
    """Refused by the argument check, before any file is read (issue 67: 5 s later)."""
    from partgnn.cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(["evaluate", str(tmp_path / "s.h5"), "--graphs", str(tmp_path / "g.h5"),
              option, value])  # fmt: skip
    assert exit_.value.code == 2
    assert f"argument {option}: must be" in capsys.readouterr().err
