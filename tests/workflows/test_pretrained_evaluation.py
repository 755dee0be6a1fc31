"""Tests of partgnn.workflows.pretrained_evaluation as a library call: the record it returns, and
what a card must say (the command around it: tests/cli/test_pretrained_evaluation.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

import partgnn
from partgnn.data.detector.geometry import default_geometry
from partgnn.data.simulation.simulated_file import write_simulated_events
from partgnn.data.simulation.simulation_config import SimulationConfig


def test_the_api_evaluates_a_shipped_model_into_a_record(tmp_path: Path):
    events, work = tmp_path / "events.h5", tmp_path / "work"
    write_simulated_events(events, default_geometry(), SimulationConfig(pileup=2), events=2,
                           seed=3)  # fmt: skip
    result = partgnn.evaluate_pretrained("pretrained:trackml-pt1", events, work)
    assert result.model == "trackml-pt1" and result.events == events
    assert result.track_building == "components" and 0 < result.cut < 1
    assert result.evaluation.events == result.limit.events > 0
    limit = result.limit.track.efficiency
    assert 0 <= result.evaluation.track.efficiency <= limit <= 1
    assert sorted(p.name for p in work.iterdir()) == [
        "evaluation-limit.json", "evaluation.json", "graphs.h5", "scores-truth.h5", "scores.h5",
    ]  # fmt: skip


def test_the_card_says_how_tracks_are_built(tmp_path: Path):
    from partgnn.data.files.model_card import ModelCard
    from partgnn.errors import InputError
    from partgnn.workflows.pretrained_evaluation import card_track_building

    path = tmp_path / "card.yaml"
    card = ModelCard.of_yaml({"score_cut": 0.5}, path)  # a card from before the field
    assert card_track_building(card) == "components"
    card = ModelCard.of_yaml({"score_cut": 0.5, "track_building": "junction"}, path)
    assert card_track_building(card) == "junction"
    card = ModelCard.of_yaml({"score_cut": 0.5, "track_building": "greedy"}, path)
    with pytest.raises(InputError, match=r"card\.yaml: track_building 'greedy' is not one of"):
        card_track_building(card)
