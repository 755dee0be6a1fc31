"""Non-finite hit positions are refused with the file and event named, whatever reads them
(METIS or geometric partitioning, training, inference), and every JSON partgnn writes is strict
(``null`` for a value that is not a number)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from partgnn import json_files
from partgnn.cli.main import main
from tests.cli.conftest import tiny_pipeline  # noqa: F401 (the fixture)
from tests.train.conftest import write_config


def _nan_position(source: Path, out: Path) -> tuple[Path, str]:
    """A copy of a graphs file with one NaN in its first event's ``pos``; returns its key."""
    shutil.copy(source, out)
    with h5py.File(out, "r+") as h5:
        key = sorted(h5["events"])[0]
        h5[f"events/{key}/pos"][0, 1] = np.nan  # through the filters: checksums stay right
    return out, key


@pytest.fixture
def nan_graphs(tiny_pipeline, tmp_path) -> tuple[Path, str]:  # noqa: F811
    return _nan_position(tiny_pipeline / "graphs.h5", tmp_path / "nan.h5")


def _one_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.strip().splitlines() if "%|" not in line]
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("method", ["metis", "phi"])
def test_partitioning_refuses_nan_positions(nan_graphs, tmp_path, capsys, method):
    graphs, key = nan_graphs
    argv = ["partition", str(graphs), "--parts", "2", "--method", method, "--out",
            str(tmp_path / "shards")]  # fmt: skip
    assert main(argv) == 2
    assert f"{graphs}: {key}: pos holds NaN or inf (1 values)" in _one_line(capsys)
    assert not (tmp_path / "shards").exists()


def test_training_and_inference_refuse_nan_positions(nan_graphs, tmp_path, capsys):
    graphs, key = nan_graphs
    config = write_config(
        tmp_path / "full.yaml", data={"graphs": str(graphs)}, run={"dir": str(tmp_path / "run")}
    )
    assert main(["train", "--config", str(config)]) == 2
    assert f"{graphs}: {key}: pos holds NaN or inf" in _one_line(capsys)
    argv = ["infer", "--checkpoint", "pretrained:trackml-pt1", "--graphs", str(graphs), "--out",
            str(tmp_path / "scores.h5"), "--device", "cpu"]  # fmt: skip
    assert main(argv) == 2
    assert f"{graphs}: {key}: pos holds NaN or inf" in _one_line(capsys)
    assert not (tmp_path / "scores.h5").exists()


def _strict_load(text: str):
    def refuse(constant: str):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_strict_json_writes_null_for_what_is_not_a_number():
    text = json_files.dumps({"a": math.nan, "b": [np.float32("inf"), 1.5], "c": np.int64(3)})
    assert _strict_load(text) == {"a": None, "b": [None, 1.5], "c": 3}


def test_summary_and_evaluation_are_strict_json(tiny_pipeline, tmp_path, capsys):  # noqa: F811
    """One validation event without target edges gives NaN metrics; the files say null."""
    graphs = tiny_pipeline / "graphs.h5"
    run = tmp_path / "run"
    config = write_config(
        tmp_path / "full.yaml",
        data={"graphs": str(graphs)},
        optim={"max_steps": 1},
        run={"dir": str(run)},
    )
    assert main(["train", "--config", str(config)]) == 0
    summary = _strict_load((run / "summary.json").read_text())
    assert summary["steps"] == 1
    scores, evaluation = tmp_path / "scores.h5", tmp_path / "evaluation.json"
    assert main(["infer", "--checkpoint", str(run / "checkpoints" / "last.pt"), "--graphs",
                 str(graphs), "--out", str(scores), "--device", "cpu"]) == 0  # fmt: skip
    assert main(["evaluate", str(scores), "--graphs", str(graphs), "--pt-min", "1000",
                 "--out", str(evaluation)]) == 0  # fmt: skip
    result = _strict_load(evaluation.read_text())  # no target particle above 1 TeV: nulls
    assert None in _leaves(result)


def _leaves(value):
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    else:
        yield value
