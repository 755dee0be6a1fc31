"""One comparison of model settings for resume, run.init_from and inference."""

from __future__ import annotations

import dataclasses

import pytest

from partgnn.errors import InputError
from partgnn.models.config import ModelConfig
from partgnn.train.config.model_settings import check_same_model, saved_model_config


def _checkpoint(**model) -> dict:
    return {"config": {"model": dataclasses.asdict(ModelConfig(**model))}}


def test_settings_of_how_it_computes_may_differ():
    saved = saved_model_config(_checkpoint(hidden=32, fused=True, recompute=True), "c.pt")
    check_same_model(saved, ModelConfig(hidden=32, fused=False, recompute=False), "c.pt")


def test_settings_of_what_it_computes_are_named():
    saved = saved_model_config(_checkpoint(hidden=64, steps=4), "c.pt")
    with pytest.raises(InputError, match=r"^c\.pt: the checkpoint's model settings differ: "
                       r"hidden 64, not 32, steps 4, not 6$"):  # fmt: skip
        check_same_model(saved, ModelConfig(hidden=32, steps=6), "c.pt")


@pytest.mark.parametrize("checkpoint", [{}, {"config": {"model": {"no_such": 1}}}])
def test_unreadable_settings_are_one_line(checkpoint):
    with pytest.raises(InputError, match=r"^c\.pt: no readable model settings \("):
        saved_model_config(checkpoint, "c.pt")


def test_an_old_checkpoint_names_recomputation_checkpoint():
    settings = dataclasses.asdict(ModelConfig(hidden=8))
    settings["checkpoint"] = settings.pop("recompute")
    saved = saved_model_config({"config": {"model": settings}}, "old.pt")
    assert saved == ModelConfig(hidden=8)
