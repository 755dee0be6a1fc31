"""tools/make_pretrained.py records how a card's tracks were built: one method for all of the
card's figures (``partgnn pretrained --evaluate`` builds tracks that way), refused when the
evaluations given were made with different ones."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

from partgnn import json_files
from partgnn.metrics.tracks import TrackMetrics
from tests.distributed.launch import REPOSITORY


@pytest.fixture(scope="module")
def tool() -> dict:
    """The tool's functions (its folder importable while it loads, as when run)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(REPOSITORY / "tools"))
        return runpy.run_path(str(REPOSITORY / "tools" / "make_pretrained.py"), run_name="tool")


def _evaluation(path: Path, **fields) -> str:
    track = TrackMetrics.from_counts(n_target_particles=4, n_reconstructed_targets=3, n_tracks=4,
                                     n_matched_tracks=3, n_duplicate_tracks=0)  # fmt: skip
    metrics = {"events": 3, "cut": 0.5, "edge": {"target_efficiency": 0.99},
               "track": json_files.strict(track.to_dict())}  # fmt: skip
    path.write_text(json.dumps({**metrics, **fields}))
    return f"{path.stem}={path}"


def test_the_card_takes_the_one_track_building_of_its_evaluations(tool, tmp_path: Path):
    junction = [_evaluation(tmp_path / f"e{i}.json", track_building="junction") for i in range(2)]
    assert tool["_track_building"](junction) == "junction"
    card = {"track_building": "junction", "held_out": {}}
    tool["_add_evaluations"](card, junction)
    assert sorted(card["held_out"]) == ["e0", "e1"]
    # evaluations from before the field were built by components
    assert tool["_track_building"]([_evaluation(tmp_path / "old.json")]) == "components"


def test_evaluations_built_two_ways_are_refused_in_one_line(tool, tmp_path: Path):
    mixed = [
        _evaluation(tmp_path / "a.json", track_building="junction"),
        _evaluation(tmp_path / "b.json", track_building="components"),
    ]
    with pytest.raises(SystemExit, match="components and junction"):
        tool["_track_building"](mixed)
    card = {"held_out": {}}  # a card from before the field: components
    with pytest.raises(SystemExit, match=r"--evaluation a: tracks built by junction") as error:
        tool["_add_evaluations"](card, mixed)
    assert "\n" not in str(error.value) and card["held_out"] == {}


def test_a_model_is_shipped_with_its_card(tool, tmp_path: Path, monkeypatch):
    """The whole tool, into a folder of its own: the checkpoint (fused off, no machine path of
    the checkpoint a stage started from) and a card with the track building of its figures."""
    import sys

    import torch
    import yaml

    from partgnn.resources import pretrained_dir
    from partgnn.train.run_directory.checkpoints import load_checkpoint
    from partgnn.train.run_directory.saved_model import SavedModel

    state = load_checkpoint(pretrained_dir() / "trackml-pt1.pt")
    state["config"]["run"]["init_from"] = "/a/machine/path/stage1.pt"
    state["step"] = 12
    start = tmp_path / "last.pt"
    torch.save(state, start)
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    monkeypatch.setitem(tool["main"].__globals__, "pretrained_dir", lambda: shipped)
    evaluation = _evaluation(tmp_path / "held.json", track_building="junction")
    monkeypatch.setattr(sys, "argv", [
        "make_pretrained.py", "--name", "tiny", "--run", str(tmp_path), "--checkpoint",
        str(start), "--evaluation", evaluation, "--summary", "a test", "--data", "none",
        "--score-cut", "0.25",
    ])  # fmt: skip
    tool["main"]()
    card = yaml.safe_load((shipped / "tiny.yaml").read_text())
    assert card["track_building"] == "junction" and card["score_cut"] == 0.25
    assert card["training"]["steps"] == 12 and "init_from" not in card["training"]["run"]
    assert card["held_out"]["held"]["edge_target_efficiency"] == 0.99
    # the card records the input lists (partgnn's own, here) and what an export is given
    assert [next(iter(c)) for c in card["inputs"]["node_features"]] == ["r", "phi", "z", "eta"]
    assert len(card["inputs"]["edge_features"]) == 7
    assert (
        "nodeFeatures [R, Phi, Z, Eta], featureScales [1000, 3.141592654, 1000, 1]"
        in (card["export"]["node_features"])
    )
    kept = SavedModel.read(shipped / "tiny.pt")
    assert kept.config["model"]["fused"] is False and kept.score_cut == 0.25
    assert "init_from" not in kept.config["run"]
