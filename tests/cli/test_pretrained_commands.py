"""The trained models shipped with partgnn: listed, named wherever a checkpoint is read, and
scoring a new event of their class as their model card says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from partgnn.cli.main import main
from partgnn.errors import InputError
from partgnn.resources import pretrained_dir, pretrained_names
from partgnn.train.checkpoints import load_checkpoint

#: How far one new event's figures may fall from the card's (5 held-out events): a pT > 1 GeV
#: pile-up-200 event has ~1300 target particles and ~18000 true edges.
EDGE_TOLERANCE = 0.01
TRACK_TOLERANCE = 0.02


def _card(name: str) -> dict:
    return yaml.safe_load((pretrained_dir() / f"{name}.yaml").read_text())


def test_the_pt1_model_is_shipped_and_listed_with_its_card(capsys):
    assert "trackml-pt1" in pretrained_names()
    assert main(["pretrained"]) == 0
    assert "pretrained:trackml-pt1" in capsys.readouterr().out
    assert main(["pretrained", "pretrained:trackml-pt1"]) == 0
    card = yaml.safe_load(capsys.readouterr().out)
    assert card["name"] == "trackml-pt1" and 0 < card["score_cut"] < 1
    assert card["model"]["fused"] is False  # scoring needs no compiler
    state = load_checkpoint("pretrained:trackml-pt1")
    assert state["score_cut"] == card["score_cut"]


def test_an_unknown_pretrained_name_is_one_line_naming_the_shipped_ones(capsys, tmp_path: Path):
    with pytest.raises(
        InputError, match=r"pretrained:nope: no such pretrained model .*trackml-pt1"
    ):
        load_checkpoint("pretrained:nope")
    events, graphs = tmp_path / "events.h5", tmp_path / "graphs.h5"
    assert main(["simulate", "--events", "1", "--pileup", "3", "--out", str(events)]) == 0
    assert main(["build-graphs", str(events), "--out", str(graphs)]) == 0
    capsys.readouterr()
    code = main(["infer", "--checkpoint", "pretrained:nope", "--graphs", str(graphs),
                 "--out", str(tmp_path / "s.h5")])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code != 0 and "no such pretrained model" in err and "\n" not in err


@pytest.mark.slow
def test_the_pt1_model_scores_a_new_event_as_its_card_says(tmp_path: Path, capsys):
    """One simulated pile-up-200 event the model never saw (seed 97), pT > 1 GeV graph."""
    card = _card("trackml-pt1")["held_out"]["simulated"]
    events, graphs = tmp_path / "events.h5", tmp_path / "graphs.h5"
    scores, metrics = tmp_path / "scores.h5", tmp_path / "metrics.json"
    for command in (
        ["simulate", "--events", "1", "--pileup", "200", "--seed", "97", "--out", str(events)],
        ["build-graphs", str(events), "--out", str(graphs), "--pt-min", "1.0"],
        ["infer", "--checkpoint", "pretrained:trackml-pt1", "--graphs", str(graphs), "--out",
         str(scores), "--device", "cpu"],
        ["evaluate", str(scores), "--graphs", str(graphs), "--events", str(events), "--out",
         str(metrics)],
    ):  # fmt: skip
        assert main(command) == 0, capsys.readouterr().err
    result = json.loads(metrics.read_text())
    assert result["cut"] == card["cut"]
    assert result["edge"]["efficiency"] >= card["edge_efficiency"] - EDGE_TOLERANCE
    assert result["edge"]["purity"] >= card["edge_purity"] - EDGE_TOLERANCE
    assert result["track"]["efficiency"] >= card["track_efficiency"] - TRACK_TOLERANCE
    assert result["track"]["n_target_particles"] > 500
