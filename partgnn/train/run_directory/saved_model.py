"""A checkpoint as scoring, export and fine-tuning read it (:class:`SavedModel`): a run's step
file or ``last.pt``, or a model shipped with partgnn (``pretrained:NAME``). The file's keys are
read here and in :mod:`partgnn.train.run_directory.training_checkpoint` (what resuming needs
besides) only; everything else reads the record."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from partgnn.errors import InputError, first_line
from partgnn.models.config import ModelConfig, renamed_settings
from partgnn.train.loss import DTYPES
from partgnn.train.run_directory.checkpoints import load_checkpoint


@dataclass(frozen=True)
class SavedModel:
    """A trained model as its checkpoint records it.

    Attributes:
        where: The checkpoint, as the user named it (for messages).
        weights: The model's ``state_dict``.
        config: The run config it was trained with, section by section.
        score_cut: The edge score cut its training chose on the validation events (a shipped
            model: its card's; ``None``: none chosen).
        construction: How the graphs it expects are built (shipped models record their card's
            ``construction``; ``None``: not recorded).
        step: The optimizer steps it was trained for (``None``: not recorded).
    """

    where: str
    weights: dict[str, torch.Tensor]
    config: dict[str, Any]
    score_cut: float | None = None
    construction: dict[str, Any] | None = None
    step: int | None = None

    @classmethod
    def read(cls, path: str | os.PathLike[str], device: torch.device | str = "cpu") -> SavedModel:
        """Reads a checkpoint (``pretrained:NAME`` too) with ``weights_only=True``, its tensors
        on ``device``.

        Raises:
            InputError: Missing, damaged, refused, or not a partgnn checkpoint (one line).
        """
        return cls.of_checkpoint(load_checkpoint(path, device), os.fspath(path))

    @classmethod
    def of_checkpoint(cls, saved: dict[str, Any], where: str) -> SavedModel:
        """The record of a checkpoint's mapping ``saved`` (as
        :func:`~partgnn.train.run_directory.checkpoints.load_checkpoint` read it)."""
        cut, step = saved.get("score_cut"), saved.get("step")
        return cls(
            where=where,
            weights=saved["model"],
            config=saved["config"] if isinstance(saved.get("config"), dict) else {},
            score_cut=None if cut is None else float(cut),
            construction=saved.get("construction"),
            step=None if step is None else int(step),
        )

    def model_config(self) -> ModelConfig:
        """The model settings it was trained with (settings renamed since read under their new
        names).

        Raises:
            InputError: It records none, or settings this version does not know (one line).
        """
        try:
            settings, _ = renamed_settings(self.config["model"])
            return ModelConfig(**settings)
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise InputError(
                f"{self.where}: no readable model settings ({first_line(err)})"
            ) from None

    def dtype(self) -> torch.dtype:
        """The dtype it was trained in (``run.dtype``).

        Raises:
            InputError: Not recorded, or not a dtype partgnn trains in (one line).
        """
        try:
            return DTYPES[self.config["run"]["dtype"]]
        except (KeyError, TypeError) as err:
            raise InputError(f"{self.where}: no readable run dtype ({first_line(err)})") from None

    def input_columns(self) -> dict[str, Any]:
        """The input columns its run read: ``data.node_features`` and ``data.edge_features``
        as the config gives them (``None``: partgnn's own)."""
        data = self.config.get("data") or {}
        return {key: data.get(key) for key in ("node_features", "edge_features")}
