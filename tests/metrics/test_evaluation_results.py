"""What partgnn evaluate writes: one record, written and read back; the files of older partgnn
(without the run's metadata) still read; a malformed one is refused in one line."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from partgnn.errors import InputError
from partgnn.metrics.construction import ConstructionMetrics
from partgnn.metrics.edge_metrics import EdgeMetrics
from partgnn.metrics.evaluation_results import EvaluationResults
from partgnn.metrics.tracks import TrackMetrics


def _track(**figures) -> TrackMetrics:
    counts = dict(n_target_particles=10, n_reconstructed_targets=8, n_tracks=9,
                  n_matched_tracks=8, n_duplicate_tracks=0)  # fmt: skip
    return TrackMetrics.from_counts(**{**counts, **figures})


def test_written_results_read_back(tmp_path: Path):
    results = EvaluationResults(
        edge=EdgeMetrics(efficiency=0.9, purity=0.5), track=_track(),
        construction=ConstructionMetrics.of_counts(
            target_doublets=4, held=3, beam_line_target_doublets=0, beam_line_held=0
        ),
        scores="s.h5", graphs="g.h5", events=3, cut=0.55, cut_source="given",
        track_building="components", target_pt=(1.0, None),
    )  # fmt: skip
    results.write(tmp_path / "evaluation.json")
    written = json.loads((tmp_path / "evaluation.json").read_text())
    assert written["edge"]["auc"] is None and written["track"]["trackml_score"] is None
    assert written["construction"]["beam_line_efficiency"] is None
    read = EvaluationResults.read(tmp_path / "evaluation.json")
    assert read == results
    assert read.edge.efficiency == 0.9 and math.isnan(read.edge.auc)
    assert read.track.efficiency == 0.8 and read.track.trackml_score is None
    assert read.construction.efficiency == 0.75
    assert math.isnan(read.construction.beam_line_efficiency)
    assert (read.cut, read.events, read.target_pt) == (0.55, 3, (1.0, None))


def test_an_evaluation_of_older_partgnn_reads(tmp_path: Path):
    """The first evaluations held the edge rates and the double-majority counts only."""
    path = tmp_path / "evaluation.json"
    first_track = {
        "n_target_particles": 4, "n_reconstructed_targets": 2, "efficiency": 0.5, "n_tracks": 3,
        "n_matched_tracks": 2, "n_fake_tracks": 1, "fake_rate": 1 / 3,
        "n_duplicate_tracks": 0, "duplicate_rate": 0.0,
    }  # fmt: skip
    path.write_text(json.dumps({"edge": {"efficiency": 0.5, "auc": 0.9}, "track": first_track}))
    read = EvaluationResults.read(path)
    assert read.edge == EdgeMetrics(efficiency=0.5, auc=0.9) and math.isnan(read.cut)
    assert read.track.efficiency == 0.5 and read.track.n_impure_tracks == 0
    assert math.isnan(read.track.efficiency_atlas) and read.track.trackml_score is None
    assert read.track_building is None and read.target_pt is None and read.construction is None
    assert EvaluationResults.read_if_present(tmp_path / "none.json") is None


TRACK = dataclasses.asdict(_track())


@pytest.mark.parametrize(
    "content, message",
    [
        ("nan?", "not valid JSON"),
        ("[]", "expected a JSON object"),
        (json.dumps({"track": {}}), "edge is missing or malformed"),
        (json.dumps({"edge": {}, "track": TRACK, "events": "3"}), "events is missing or malformed"),
        (json.dumps({"edge": {}, "track": TRACK, "target_pt": [1]}), "target_pt must be"),
        (json.dumps({"edge": {"purity": "high"}, "track": TRACK}), "edge: purity must be a number"),
        (json.dumps({"edge": {}, "track": {}}), "track: n_target_particles must be a whole"),
        (json.dumps({"edge": {}, "track": {**TRACK, "n_tracks": 2.5}}), "n_tracks must be a whole"),
        (
            json.dumps({"edge": {}, "track": TRACK, "construction": {"held": 1}}),
            "construction: target_doublets must be a whole",
        ),
    ],
)
def test_a_malformed_evaluation_is_refused_in_one_line(tmp_path: Path, content, message):
    path = tmp_path / "evaluation.json"
    path.write_text(content)
    with pytest.raises(InputError, match=message) as error:
        EvaluationResults.read(path)
    assert str(error.value).startswith(str(path)) and "\n" not in str(error.value)
