"""One comparison of a checkpoint's model settings with a config's, for resume, ``run.init_from``
and inference.

A checkpoint records the run config it was trained with; its ``model`` section says what the
model computes (:meth:`~partgnn.train.run_directory.saved_model.SavedModel.model_config`).
Some of its settings change only how that is computed
(:data:`~partgnn.models.config.COMPUTE_ONLY_SETTINGS`): a run resumes across them and starts from
a checkpoint saved with other values.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from partgnn.errors import InputError
from partgnn.models.config import COMPUTE_ONLY_SETTINGS, ModelConfig


def _what_it_computes(model: ModelConfig) -> dict[str, Any]:
    settings = dataclasses.asdict(model)
    return {k: v for k, v in settings.items() if k not in COMPUTE_ONLY_SETTINGS}


def check_same_model(saved: ModelConfig, ours: ModelConfig, where: str) -> None:
    """Refuses a checkpoint whose model computes something else than the config's.

    Raises:
        InputError: ``<where>: the checkpoint's model settings differ: hidden 64, not 32, ...``.
    """
    theirs, mine = _what_it_computes(saved), _what_it_computes(ours)
    differing = sorted(key for key in mine if mine[key] != theirs.get(key))
    if differing:
        pairs = ", ".join(f"{key} {theirs.get(key)!r}, not {mine[key]!r}" for key in differing)
        raise InputError(f"{where}: the checkpoint's model settings differ: {pairs}")
