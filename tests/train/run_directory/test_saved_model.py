"""Tests of partgnn.train.run_directory.saved_model: a checkpoint as scoring, export and
fine-tuning read it, old checkpoints included."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from partgnn.errors import InputError
from partgnn.models.config import ModelConfig
from partgnn.train.run_directory.checkpoints import save_checkpoint
from partgnn.train.run_directory.saved_model import SavedModel


def _saved(**model) -> SavedModel:
    return SavedModel("c.pt", {}, {"model": dataclasses.asdict(ModelConfig(**model))})


def test_a_shipped_model_reads_with_its_cut_construction_and_columns():
    saved = SavedModel.read("pretrained:trackml-pt1")
    assert saved.where == "pretrained:trackml-pt1" and 0 < saved.score_cut < 1
    assert saved.construction == {"method": "geometric", "pt_min": 1.0}
    assert saved.model_config().hidden > 0 and saved.dtype() == torch.float32
    assert set(saved.input_columns()) == {"node_features", "edge_features"}
    assert saved.weights and all(isinstance(w, torch.Tensor) for w in saved.weights.values())


def test_a_run_checkpoint_records_its_step_and_a_bare_one_reads_as_none(tmp_path):
    config = {"model": dataclasses.asdict(ModelConfig(hidden=8)), "run": {"dtype": "float64"}}
    path = save_checkpoint(tmp_path, 7, {"model": {}, "config": config, "step": 7})
    saved = SavedModel.read(path)
    assert (saved.step, saved.score_cut, saved.construction) == (7, None, None)
    assert saved.dtype() == torch.float64 and saved.model_config() == ModelConfig(hidden=8)
    assert saved.input_columns() == {"node_features": None, "edge_features": None}
    bare = save_checkpoint(tmp_path / "bare", 1, {"model": {}, "config": {"model": {}}})
    assert SavedModel.read(bare).step is None


@pytest.mark.parametrize("config", [{}, {"model": {"no_such": 1}}])
def test_unreadable_settings_are_one_line(config):
    with pytest.raises(InputError, match=r"^c\.pt: no readable model settings \("):
        SavedModel("c.pt", {}, config).model_config()
    with pytest.raises(InputError, match=r"^c\.pt: no readable run dtype \("):
        SavedModel("c.pt", {}, config).dtype()


def test_an_old_checkpoint_names_recomputation_checkpoint():
    settings = dataclasses.asdict(ModelConfig(hidden=8))
    settings["checkpoint"] = settings.pop("recompute")
    assert SavedModel("old.pt", {}, {"model": settings}).model_config() == ModelConfig(hidden=8)
    assert _saved(hidden=8, recompute=True).model_config().recompute
