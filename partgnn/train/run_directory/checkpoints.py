"""Checkpoints: written atomically, read with ``weights_only=True``.

A checkpoint holds the model, optimizer and scheduler states, the position in training (epoch,
step, step within the epoch), the running epoch accumulators and every rank's random-number
generator states (:mod:`partgnn.train.run_directory.rng_states`), so a resumed run continues exactly
where the checkpoint was taken.
"""

from __future__ import annotations

import os
import pickle
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from partgnn.data.files.output_files import atomic_output
from partgnn.data.files.zip_records import check_zip_records
from partgnn.errors import InputError, OutputError, first_line
from partgnn.resources import resolve_checkpoint

LAST = "last.pt"

#: Keys of a checkpoint that training can resume from.
TRAINING_STATE = (
    "model",
    "optimizer",
    "scheduler",
    "epoch",
    "step",
    "step_in_epoch",
    "totals",
    "config",
)


def step_path(directory: str | os.PathLike[str], step: int) -> Path:
    """``directory/step-NNNNNNN.pt``: the checkpoint written at ``step``."""
    return Path(directory) / f"step-{step:07d}.pt"


def step_of(path: Path) -> int:
    """7 for ``step-0000007.pt``."""
    return int(path.stem.removeprefix("step-"))


def save_checkpoint(directory: str | os.PathLike[str], step: int, state: dict[str, Any]) -> Path:
    """Writes ``step-NNNNNNN.pt`` and ``last.pt`` in ``directory``; returns the step file."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = step_path(directory, step)
    for target in (path, directory / LAST):
        with atomic_output(target) as tmp:
            try:
                torch.save(state, tmp)
            except RuntimeError as err:  # torch's C++ writer: "basic_ios::clear: iostream error"
                free = shutil.disk_usage(directory).free
                raise OutputError(
                    f"{target}: could not be written ({first_line(err)}; {free} bytes free "
                    "on its file system)"
                ) from None
    return path


def prune_step_checkpoints(directory: str | os.PathLike[str], keep: int) -> list[Path]:
    """Removes all but the newest ``keep`` step files of ``directory``; returns those removed.

    ``last.pt`` is never removed; a resume whose ``last.pt`` is damaged falls back on the newest
    intact step file (:func:`newest_intact_checkpoint`), so ``keep`` bounds the fallbacks too.
    """
    if keep < 1:
        raise ValueError(f"keep must be >= 1 (got {keep})")
    steps = sorted(Path(directory).glob("step-*.pt"), key=step_of, reverse=True)
    removed = steps[keep:]
    for path in removed:
        path.unlink(missing_ok=True)
    return removed


def load_checkpoint(
    path: str | os.PathLike[str],
    device: torch.device | str = "cpu",
    *,
    required: Iterable[str] = ("model", "config"),
) -> dict[str, Any]:
    """Reads a checkpoint with ``weights_only=True`` (no arbitrary code from the file).

    Args:
        path: The checkpoint file, or ``pretrained:NAME`` (a model shipped with the package,
            :func:`~partgnn.resources.resolve_checkpoint`).
        device: Where its tensors go.
        required: Top-level keys it must hold (:data:`TRAINING_STATE` to resume training).

    Raises:
        InputError: If the file is missing, corrupted (a record's CRC-32 differs), not a
            torch file, holds objects that loading with
            ``weights_only=True`` refuses (a pickle that would run code), lacks a key, or its
            model weights are not finite (a diverged run: scores from it would be NaN).
    """
    path = resolve_checkpoint(path)
    if not path.is_file():
        raise InputError(f"{path}: checkpoint not found")
    check_zip_records(path)
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError as err:
        raise InputError(f"{path}: refused, not a plain checkpoint ({_refusal(err)})") from None
    except Exception as err:  # garbage makes the unpickler raise anything (IndexError, ...)
        raise InputError(
            f"{path}: not a readable checkpoint ({type(err).__name__}: {first_line(err)})"
        ) from None
    if not isinstance(state, dict):
        raise InputError(f"{path}: not a partgnn checkpoint (holds a {type(state).__name__})")
    missing = [key for key in required if key not in state]
    if missing:
        raise InputError(
            f"{path}: not a partgnn training checkpoint (lacks {', '.join(map(repr, missing))})"
        )
    weights = state.get("model")
    if isinstance(weights, dict):
        for name, tensor in weights.items():
            if (
                isinstance(tensor, torch.Tensor)
                and tensor.is_floating_point()
                and not bool(torch.isfinite(tensor).all())
            ):
                raise InputError(
                    f"{path}: model weight {name} is not finite (the run diverged); refused"
                )
    return state


def newest_intact_checkpoint(directory: str | os.PathLike[str]) -> tuple[Path | None, list[str]]:
    """The checkpoint a resume should read: the newest one (by its training step) that loads.

    ``last.pt`` normally; a ``step-NNNNNNN.pt`` when ``last.pt`` is missing or damaged (a flipped
    byte, torn by a full disk) or older (its write failed after the step file's).

    Args:
        directory: The run's ``checkpoints`` folder.

    Returns:
        The checkpoint (``None`` when no file loads) and the one-line reasons of the files
        skipped, newest first.
    """
    directory = Path(directory)
    skipped: list[str] = []
    candidates = [(step_of(p), 0, p) for p in directory.glob("step-*.pt")]
    last = directory / LAST
    if last.is_file():
        try:
            state = load_checkpoint(last, "cpu", required=TRAINING_STATE)
            candidates.append((int(state["step"]), 1, last))  # preferred on a tie
        except InputError as err:
            skipped.append(first_line(err))
    for _, _, path in sorted(candidates, reverse=True):
        if path == last:
            return path, skipped
        try:
            load_checkpoint(path, "cpu", required=TRAINING_STATE)
        except InputError as err:
            skipped.append(first_line(err))
            continue
        return path, skipped
    return None, skipped


def _refusal(err: pickle.UnpicklingError) -> str:
    """The reason in torch's long "Weights only load failed" message, on one line."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    for line in lines:
        if line.startswith(("Trying to load", "Unsupported", "WeightsUnpickler error:")):
            reason = line.removeprefix("WeightsUnpickler error:").strip()
            if reason:
                return reason
    return "not loadable with weights_only=True"
