"""What partgnn evaluate writes: one record, written and read back; the files of older partgnn
(without the run's metadata) still read; a malformed one is refused in one line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from partgnn.errors import InputError
from partgnn.metrics.evaluation_results import EvaluationResults


def test_written_results_read_back(tmp_path: Path):
    results = EvaluationResults(
        edge={"efficiency": 0.9, "auc": float("nan")}, track={"efficiency": 0.8, "fake": None},
        construction=None, scores="s.h5", graphs="g.h5", events=3, cut=0.55,
        cut_source="given", track_building="components", target_pt=(1.0, None),
    )  # fmt: skip
    results.write(tmp_path / "evaluation.json")
    assert json.loads((tmp_path / "evaluation.json").read_text())["edge"]["auc"] is None
    read = EvaluationResults.read(tmp_path / "evaluation.json")
    assert read.number("edge", "efficiency") == 0.9 and math.isnan(read.number("edge", "auc"))
    assert math.isnan(read.number("track", "fake")) and math.isnan(read.number("track", "none"))
    assert math.isnan(read.number("construction", "efficiency"))
    assert (read.cut, read.events, read.target_pt) == (0.55, 3, (1.0, None))
    with pytest.raises(ValueError, match="no section 'tracks'"):
        read.number("tracks", "efficiency")


def test_an_evaluation_of_older_partgnn_reads(tmp_path: Path):
    path = tmp_path / "evaluation.json"
    path.write_text(json.dumps({"edge": {"efficiency": 0.5}, "track": {}}))
    read = EvaluationResults.read(path)
    assert read.edge == {"efficiency": 0.5} and math.isnan(read.cut)
    assert read.track_building is None and read.target_pt is None
    assert EvaluationResults.read_if_present(tmp_path / "none.json") is None


@pytest.mark.parametrize(
    "content, message",
    [
        ("nan?", "not valid JSON"),
        ("[]", "expected a JSON object"),
        (json.dumps({"track": {}}), "edge is missing or malformed"),
        (json.dumps({"edge": {}, "track": {}, "events": "3"}), "events is missing or malformed"),
        (json.dumps({"edge": {}, "track": {}, "target_pt": [1]}), "target_pt must be"),
    ],
)
def test_a_malformed_evaluation_is_refused_in_one_line(tmp_path: Path, content, message):
    path = tmp_path / "evaluation.json"
    path.write_text(content)
    with pytest.raises(InputError, match=message) as error:
        EvaluationResults.read(path)
    assert str(error.value).startswith(str(path)) and "\n" not in str(error.value)
