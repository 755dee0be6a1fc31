"""A training checkpoint as one record (:class:`TrainingCheckpoint`): what the trainer writes at
every checkpoint step and reads back to resume, so that a resumed run continues exactly where
the checkpoint was taken. The file itself is written atomically and read with
``weights_only=True`` (:mod:`partgnn.train.run_directory.checkpoints`); its keys are this
module's business alone."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from partgnn.train.run_directory.checkpoints import (
    TRAINING_STATE,
    load_checkpoint,
    prune_step_checkpoints,
    save_checkpoint,
)
from partgnn.train.run_directory.saved_model import SavedModel
from partgnn.train.run_directory.state import TrainState


@dataclass
class TrainingCheckpoint:
    """Everything a run needs to continue from a step.

    Attributes:
        model: The model's weights (its ``state_dict``).
        optimizer: AdamW's state (its moments and step counters).
        scheduler: The learning-rate scheduler's state.
        state: Where training stands (epoch, step, the epoch's sums, the score cut).
        wall_time_s: The run's wall time [s] up to the checkpoint, every sitting's.
        config: The run config, section by section.
        rng_states: Every rank's random-generator states, by global rank
            (:mod:`partgnn.train.run_directory.rng_states`; ``None`` in older checkpoints).
        trajectory: What shapes the run's trajectory, compared on resume
            (:func:`~partgnn.train.run_directory.resume.trajectory_settings`; ``None`` in older
            checkpoints).
        saved_model: The model as scoring reads it (``None`` for one not yet written): what
            the resume checks compare with the run's config.
    """

    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    scheduler: dict[str, Any]
    state: TrainState
    wall_time_s: float
    config: dict[str, Any]
    rng_states: list[dict[str, torch.Tensor | None]] | None = None
    trajectory: dict[str, Any] | None = None
    saved_model: SavedModel | None = field(default=None, repr=False)

    def as_dict(self) -> dict[str, Any]:
        """The checkpoint's mapping as the file holds it."""
        return {
            "model": self.model,
            "optimizer": self.optimizer,
            "scheduler": self.scheduler,
            **self.state.as_checkpoint(wall_time_s=self.wall_time_s),
            "config": self.config,
            "rng_states": self.rng_states,
            "trajectory": self.trajectory,
        }

    def save(self, directory: str | os.PathLike[str], *, keep: int) -> Path:
        """Writes ``step-NNNNNNN.pt`` and ``last.pt`` in ``directory`` and keeps the newest
        ``keep`` step files; returns the step file."""
        path = save_checkpoint(directory, self.state.step, self.as_dict())
        prune_step_checkpoints(directory, keep)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TrainingCheckpoint:
        """Reads a checkpoint training can resume from, onto the CPU (loading then copies the
        weights and AdamW's moments onto the parameters' device and leaves AdamW's step counters
        on the CPU, where non-fused AdamW reads them: on a GPU each would cost a host
        synchronisation per parameter and step).

        Raises:
            InputError: Unreadable, refused, or not a training checkpoint (one line).
        """
        saved = load_checkpoint(path, "cpu", required=TRAINING_STATE)
        state = TrainState.from_checkpoint(saved)
        return cls(
            model=saved["model"],
            optimizer=saved["optimizer"],
            scheduler=saved["scheduler"],
            state=state,
            wall_time_s=state.earlier_wall_s,
            config=saved["config"],
            rng_states=saved.get("rng_states"),
            trajectory=saved.get("trajectory"),
            saved_model=SavedModel.of_checkpoint(saved, os.fspath(path)),
        )
