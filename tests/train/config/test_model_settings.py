"""One comparison of model settings for resume, run.init_from and inference."""

from __future__ import annotations

import pytest

from partgnn.errors import InputError
from partgnn.models.config import ModelConfig
from partgnn.train.config.model_settings import check_same_model


def test_settings_of_how_it_computes_may_differ():
    saved = ModelConfig(hidden=32, fused=True, recompute=True)
    check_same_model(saved, ModelConfig(hidden=32, fused=False, recompute=False), "c.pt")


def test_settings_of_what_it_computes_are_named():
    saved = ModelConfig(hidden=64, steps=4)
    with pytest.raises(InputError, match=r"^c\.pt: the checkpoint's model settings differ: "
                       r"hidden 64, not 32, steps 4, not 6$"):  # fmt: skip
        check_same_model(saved, ModelConfig(hidden=32, steps=6), "c.pt")
