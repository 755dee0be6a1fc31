"""Tests of partgnn.data.files.model_card: every shipped card reads into one record; a card that
does not read is one line naming its file."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from partgnn.data.files.model_card import CardConstruction, HeldOutFigures, ModelCard
from partgnn.errors import InputError
from partgnn.metrics.edge_metrics import EdgeMetrics
from partgnn.metrics.evaluation_results import EvaluationResults
from partgnn.metrics.tracks import TrackMetrics
from partgnn.resources import pretrained_names

TRACK = TrackMetrics.from_counts(n_target_particles=4, n_reconstructed_targets=3, n_tracks=4,
                                 n_matched_tracks=3, n_duplicate_tracks=0)  # fmt: skip


@pytest.mark.parametrize("name", pretrained_names())
def test_every_shipped_card_reads(name):
    card = ModelCard.read(f"pretrained:{name}")
    assert card.name == name and card.spec == f"pretrained:{name}"
    assert 0 < card.score_cut < 1 and card.summary
    assert card.construction is not None
    assert 0 <= card.figure("simulated", "edge_target_efficiency") <= 1


def test_the_full_models_construction_is_a_map_fit_the_library_can_run():
    construction = ModelCard.read("trackml-full").construction
    assert construction.by_module_map and len(construction.module_map_sha256) == 64
    assert construction.module_map_file == "trackml-full.map.npz"
    assert construction.map_fit.fit.triplets and construction.map_fit.simulated.runs
    geometric = ModelCard.read("trackml-pt1").construction
    assert (geometric.method, geometric.pt_min, geometric.map_fit) == ("geometric", 1.0, None)


def test_what_a_card_lacks_reads_as_the_cards_before_it(tmp_path: Path):
    card = ModelCard.of_yaml({"score_cut": 0.5}, tmp_path / "old.yaml")
    assert card.name == "old" and card.track_building == "components"
    assert card.construction is None and math.isnan(card.figure("simulated", "x"))
    assert ModelCard.of_yaml({}, tmp_path / "bare.yaml").score_cut is None


@pytest.mark.parametrize(
    "content, says",
    [
        ([1, 2], "not a model card"),
        ({"score_cut": 2}, "score_cut 2: a number between 0 and 1"),
        ({"score_cut": 0.5, "construction": {"method": "magic"}}, "geometric or module-map"),
        ({"score_cut": 0.5, "construction": {"method": "module-map"}}, "module_map_sha256"),
        ({"held_out": {"simulated": [0.9]}}, "held_out.simulated: expected a mapping"),
        ({"held_out": {"simulated": {"target_pt": [1]}}}, r"target_pt \[1\]: \[pt_min, pt_max\]"),
        ({"held_out": {"simulated": {"track_efficiency": "high"}}}, "track_efficiency 'high'"),
    ],
)
def test_a_card_that_does_not_read_is_one_line_naming_it(tmp_path: Path, content, says):
    with pytest.raises(InputError, match=says) as refused:
        ModelCard.of_yaml(content, tmp_path / "card.yaml")
    assert str(refused.value).startswith(str(tmp_path / "card.yaml"))
    assert "\n" not in str(refused.value)


def test_a_construction_without_a_recorded_fit_has_none():
    construction = CardConstruction.of_yaml(
        {"method": "module-map", "module_map_sha256": "a" * 64}, "c"
    )
    assert construction.by_module_map and construction.map_fit is None


@pytest.mark.parametrize("name", pretrained_names())
def test_a_shipped_cards_records_write_what_it_holds(name):
    """The construction and held-out entries, written by their records (as
    tools/make_pretrained.py writes a card), are the card's own YAML, and read back the same."""
    card = ModelCard.read(f"pretrained:{name}")
    assert card.construction.as_yaml() == card.content["construction"]
    assert CardConstruction.of_yaml(card.construction.as_yaml(), "c") == card.construction
    for label, entry in card.held_out.items():
        assert entry.as_yaml() == card.content["held_out"][label], label
        assert HeldOutFigures.of_yaml(entry.as_yaml(), label) == entry


def test_an_evaluation_gives_the_figures_a_card_quotes():
    evaluation = EvaluationResults(
        edge=EdgeMetrics(efficiency=0.5, target_efficiency=0.987654321), track=TRACK,
        events=3, cut=0.25, target_pt=(0.5, 1.0),
    )  # fmt: skip
    entry = evaluation.held_out_figures()
    assert (entry.events, entry.cut, entry.target_pt) == (3, 0.25, (0.5, 1.0))
    assert entry.figure("edge_target_efficiency") == 0.987654321
    assert entry.as_yaml()["edge_target_efficiency"] == 0.9877  # rounded on the card
    assert entry.as_yaml()["edge_auc"] is None  # undefined: null
    assert "construction_efficiency" not in entry.figures  # no events file evaluated
    assert math.isnan(entry.figure("construction_efficiency"))
