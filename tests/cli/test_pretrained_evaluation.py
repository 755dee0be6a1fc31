"""``partgnn pretrained NAME --evaluate EVENTS``: the shipped models on the real TrackML sample
event, built, scored and evaluated as their cards say, with the figures their cards record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from partgnn.cli.main import main
from partgnn.resources import pretrained_dir

#: The sample is one event (~54 target particles above 1 GeV, ~700 target edges): the same
#: model on the same graph gives the same figures up to the last bits of another CPU's sums,
#: which can move an edge across the cut (1/700) or a track (1/54).
EDGE_TOLERANCE = 0.003
TRACK_TOLERANCE = 0.02
#: The construction does not depend on a model's arithmetic.
CONSTRUCTION_TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def sample_events(sample_dir: Path, tmp_path_factory) -> Path:
    events = tmp_path_factory.mktemp("sample") / "events.h5"
    assert main(["import-trackml", str(sample_dir), "--out", str(events)]) == 0
    return events


@pytest.mark.parametrize("name", ["trackml-pt1", "trackml-full"])
def test_each_model_scores_the_real_sample_as_its_card_says(
    sample_events: Path, tmp_path: Path, capsys, name: str
):
    card = yaml.safe_load((pretrained_dir() / f"{name}.yaml").read_text())["held_out"]
    work = tmp_path / "work"
    assert main(["pretrained", name, "--evaluate", str(sample_events), "--work", str(work)]) == 0
    out = capsys.readouterr().out
    assert "| figure | these events | card: simulated held-out |" in out
    for label, file_name in (
        ("trackml-sample", "evaluation.json"),
        ("trackml-sample-construction-limit", "evaluation-limit.json"),
    ):
        figures, recorded = json.loads((work / file_name).read_text()), card[label]
        assert figures["cut"] == recorded["cut"]
        construction = figures["construction"]
        for key in ("efficiency", "beam_line_efficiency"):
            assert construction[key] == pytest.approx(
                recorded[f"construction_{key}"], abs=CONSTRUCTION_TOLERANCE
            )
        for key in ("target_efficiency", "masked_purity"):
            assert figures["edge"][key] == pytest.approx(
                recorded[f"edge_{key}"], abs=EDGE_TOLERANCE
            )
        for key in ("efficiency", "efficiency_atlas"):
            assert figures["track"][key] == pytest.approx(
                recorded[f"track_{key}"], abs=TRACK_TOLERANCE
            )


def test_evaluate_needs_a_model_name_and_an_events_file(tmp_path: Path, capsys):
    assert main(["pretrained", "--evaluate", str(tmp_path / "events.h5")]) != 0
    err = capsys.readouterr().err.strip()
    assert "name the model" in err and "\n" not in err
    missing = tmp_path / "nothing.h5"
    code = main(["pretrained", "trackml-pt1", "--evaluate", str(missing), "--work",
                 str(tmp_path / "w")])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code != 0 and str(missing) in err and "\n" not in err
    assert not (tmp_path / "w").exists()


def test_the_card_says_how_tracks_are_built(tmp_path: Path):
    from partgnn.cli.pretrained_evaluation import card_track_building
    from partgnn.errors import InputError

    card = tmp_path / "card.yaml"
    assert card_track_building({}, card) == "components"  # cards from before the field
    assert card_track_building({"track_building": "junction"}, card) == "junction"
    with pytest.raises(InputError, match=r"card\.yaml: track_building 'greedy' is not one of"):
        card_track_building({"track_building": "greedy"}, card)
