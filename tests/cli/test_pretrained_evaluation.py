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


@pytest.mark.parametrize("name", ["trackml-pt1", "trackml-full", "trackml-full-positions"])
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


def _evaluate(events: Path, *work: str) -> list[str]:
    return ["pretrained", "trackml-pt1", "--evaluate", str(events), *work]


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}  # fmt: skip


@pytest.mark.parametrize("name", ["graphs.h5", "scores.h5"])
def test_the_events_inside_the_work_folder_are_refused_untouched(
    tiny_pipeline: Path, tmp_path: Path, capsys, name: str
):
    work = tmp_path / "w2"
    work.mkdir()
    events = work / name
    events.write_bytes((tiny_pipeline / "events.h5").read_bytes())
    before = _tree(work)
    assert main(_evaluate(events, "--work", str(work))) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "holds the input 'EVENTS'" in err and "--work" in err, err
    assert _tree(work) == before


def test_a_folder_with_what_an_evaluation_does_not_write_is_refused_untouched(
    tiny_pipeline: Path, tmp_path: Path, capsys
):
    run = tmp_path / "run"  # a training run's folder, with its own scores and evaluation
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.pt").write_bytes(b"weights")
    (run / "scores.h5").write_bytes(b"scores")
    (run / "evaluation.json").write_text('{"mine": 1}\n')
    hand = tmp_path / "hand"  # only a hand-written evaluation.json
    hand.mkdir()
    (hand / "evaluation.json").write_text('{"by": "hand"}\n')
    for work in (run, hand):
        before = _tree(work)
        assert main(_evaluate(tiny_pipeline / "events.h5", "--work", str(work))) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "did not write" in err and "--work" in err, err
        assert _tree(work) == before
    file = tmp_path / "a-file"
    file.write_text("mine")
    assert main(_evaluate(tiny_pipeline / "events.h5", "--work", str(file))) == 2
    assert "exists and is not a folder" in capsys.readouterr().err
    assert file.read_text() == "mine"


def test_each_model_has_its_own_default_folder_and_an_earlier_one_is_replaced(
    tiny_pipeline: Path, tmp_path: Path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    events = tiny_pipeline / "events.h5"
    assert main(_evaluate(events)) == 0
    first = tmp_path / "events-trackml-pt1-evaluation"
    assert sorted(_tree(first)) == sorted(
        ["graphs.h5", "scores.h5", "scores-truth.h5", "evaluation.json", "evaluation-limit.json"]
    )
    assert "replacing" not in capsys.readouterr().err
    assert main(_evaluate(events)) == 0  # its own earlier output: replaced, and said
    assert f"replacing {first.name} (an earlier evaluation's files)" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == [first.name]


def test_an_interrupted_evaluation_leaves_the_folder_as_it_was(
    tiny_pipeline: Path, tmp_path: Path, capsys, monkeypatch
):
    from partgnn.workflows import pretrained_evaluation

    work = tmp_path / "work"
    assert main(_evaluate(tiny_pipeline / "events.h5", "--work", str(work))) == 0
    before = _tree(work)
    real = pretrained_evaluation._build_score_evaluate

    def interrupted(name, card, events, staging, *rest):
        real(name, card, events, staging, *rest)  # everything written, then Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(pretrained_evaluation, "_build_score_evaluate", interrupted)
    assert main(_evaluate(tiny_pipeline / "events.h5", "--work", str(work))) == 130
    assert _tree(work) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]  # no staging folder left


def test_work_and_workers_need_the_action_they_are_for(capsys):
    for argv, needs in ((["--work", "w"], "--evaluate"), (["--workers", "2"], "--make-map")):
        assert main(["pretrained", "trackml-pt1", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and needs in err, err
