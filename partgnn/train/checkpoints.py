"""Checkpoints: written atomically, read with ``weights_only=True``.

A checkpoint holds the model, optimizer and scheduler states, the position in training (epoch,
step, step within the epoch), the running epoch accumulators and the RNG state, so a resumed run
continues exactly where the checkpoint was taken.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from partgnn.data.storage import atomic_output
from partgnn.errors import InputError, first_line

LAST = "last.pt"


def save_checkpoint(directory: str | os.PathLike[str], step: int, state: dict[str, Any]) -> Path:
    """Writes ``step-NNNNNNN.pt`` and ``last.pt`` in ``directory``; returns the step file."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"step-{step:07d}.pt"
    for target in (path, directory / LAST):
        with atomic_output(target) as tmp:
            torch.save(state, tmp)
    return path


def load_checkpoint(path: str | os.PathLike[str], device: torch.device | str = "cpu") -> dict:
    """Reads a checkpoint with ``weights_only=True`` (no arbitrary code from the file).

    Raises:
        InputError: If the file is missing or not a readable checkpoint.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: checkpoint not found")
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except (RuntimeError, OSError, EOFError, ValueError) as err:
        raise InputError(f"{path}: not a readable checkpoint ({first_line(err)})") from None
