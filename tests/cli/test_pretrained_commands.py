"""The trained models shipped with partgnn: listed, named wherever a checkpoint is read, and
scoring a new event of their class as their model card says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from partgnn.cli.main import main
from partgnn.data.graphs.input_features import InputFeatures
from partgnn.errors import InputError
from partgnn.export.export_model import kept_node_inputs, recorded_input_features
from partgnn.export.node_inputs import NodeInputs
from partgnn.resources import pretrained_dir, pretrained_names
from partgnn.train.run_directory.saved_model import SavedModel

#: How far one new event's figures may fall from the card's (5 held-out events): a pT > 1 GeV
#: pile-up-200 event has ~1300 target particles and ~18000 true edges.
EDGE_TOLERANCE = 0.01
TRACK_TOLERANCE = 0.02


def _card(name: str) -> dict:
    return yaml.safe_load((pretrained_dir() / f"{name}.yaml").read_text())


@pytest.mark.parametrize("name", ["trackml-pt1", "trackml-full", "trackml-full-positions"])
def test_the_models_are_shipped_and_listed_with_their_cards(capsys, name: str):
    assert name in pretrained_names()
    assert main(["pretrained"]) == 0
    assert f"pretrained:{name}" in capsys.readouterr().out
    assert main(["pretrained", f"pretrained:{name}"]) == 0
    card = yaml.safe_load(capsys.readouterr().out)
    assert card["name"] == name and 0 < card["score_cut"] < 1
    assert card["model"]["fused"] is False  # scoring needs no compiler
    saved = SavedModel.read(f"pretrained:{name}")
    assert saved.score_cut == card["score_cut"]
    # the card's input lists are the model's (its checkpoint's config): partgnn's own four
    # node columns first, then any fields of its graphs files (trackml-full: cluster shapes)
    recorded = recorded_input_features(saved)
    assert InputFeatures.parse(*card["inputs"].values()) == recorded
    kept = kept_node_inputs(saved)
    assert recorded.widths == (4 + len(kept), 7)
    # how to take it to ACTS, with the node features it is given (partgnn export's default)
    assert card["export"]["how"].startswith(f"partgnn export pretrained:{name} --format")
    inputs = NodeInputs.parse(None, None, kept=kept)
    assert inputs.describe().startswith(NodeInputs().describe())
    assert card["export"]["node_features"].startswith(
        f"(N, {4 + len(kept)}) float32: {inputs.describe()}"
    )


def test_an_unknown_pretrained_name_is_one_line_naming_the_shipped_ones(capsys, tmp_path: Path):
    with pytest.raises(
        InputError, match=r"pretrained:nope: no such pretrained model .*trackml-pt1"
    ):
        SavedModel.read("pretrained:nope")
    events, graphs = tmp_path / "events.h5", tmp_path / "graphs.h5"
    assert main(["simulate", "--events", "1", "--pileup", "3", "--out", str(events)]) == 0
    assert main(["build-graphs", str(events), "--out", str(graphs)]) == 0
    capsys.readouterr()
    code = main(["infer", "--checkpoint", "pretrained:nope", "--graphs", str(graphs),
                 "--out", str(tmp_path / "s.h5")])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code != 0 and "no such pretrained model" in err and "\n" not in err


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "build"),
    [
        ("trackml-pt1", ["--pt-min", "1.0"]),
        ("trackml-full", ["--method", "module-map", "--map", "pretrained:trackml-full"]),
        (
            "trackml-full-positions",
            ["--method", "module-map", "--map", "pretrained:trackml-full-positions"],
        ),
    ],
    ids=["pt1", "full", "full-positions"],
)
def test_a_model_scores_a_new_event_as_its_card_says(tmp_path: Path, capsys, name, build):
    """One simulated pile-up-200 event the models never saw (seed 97): its pT > 1 GeV graph for
    trackml-pt1, its full graph (every hit) built with the card's module map for trackml-full
    and trackml-full-positions (one map file, shipped with the package: no fit); pT > 1 GeV
    targets for all. Simulated with the
    card's ``simulation`` options (the switches its training events were made with)."""
    simulation = _card(name).get("simulation", [])
    card = _card(name)["held_out"]["simulated"]
    events, graphs = tmp_path / "events.h5", tmp_path / "graphs.h5"
    scores, metrics = tmp_path / "scores.h5", tmp_path / "metrics.json"
    for command in (
        ["simulate", "--events", "1", "--pileup", "200", "--seed", "97", *simulation,
         "--out", str(events)],
        ["build-graphs", str(events), "--out", str(graphs), *build],
        ["infer", "--checkpoint", f"pretrained:{name}", "--graphs", str(graphs), "--out",
         str(scores), "--device", "cpu"],
        ["evaluate", str(scores), "--graphs", str(graphs), "--events", str(events), "--out",
         str(metrics)],
    ):  # fmt: skip
        assert main(command) == 0, capsys.readouterr().err
    result = json.loads(metrics.read_text())
    assert result["cut"] == card["cut"]
    assert result["edge"]["target_efficiency"] >= card["edge_target_efficiency"] - EDGE_TOLERANCE
    assert result["edge"]["purity"] >= card["edge_purity"] - EDGE_TOLERANCE
    assert result["track"]["efficiency"] >= card["track_efficiency"] - TRACK_TOLERANCE
    assert result["track"]["n_target_particles"] > 500
    if "edge_masked_purity" in card:  # the full-graph model's card quotes acorn's figures
        assert result["edge"]["masked_purity"] >= card["edge_masked_purity"] - EDGE_TOLERANCE
        assert result["track"]["efficiency_atlas"] >= (
            card["track_efficiency_atlas"] - TRACK_TOLERANCE
        )
    assert "warning" not in capsys.readouterr().err  # graphs built as the model expects
