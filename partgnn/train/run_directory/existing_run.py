"""What a run directory holds: a run to keep, a finished run, or room for a new one.

A run directory holds a run once it holds something a user would lose: a checkpoint, a
``summary.json``, or a ``metrics.csv`` with at least one row. ``partgnn train`` into such a
directory continues it (``--resume``) or, with ``--replace``, removes the old run's files first;
without either it is refused (:func:`refusal`), so a finished run is never overwritten silently.
A directory that holds only the remnants of a run stopped before its first checkpoint (a config
snapshot, a metrics.csv header, TensorBoard files) holds nothing to lose: a new run clears them.
"""

from __future__ import annotations

import csv
import os
import re
from dataclasses import dataclass
from pathlib import Path

from partgnn.errors import InputError
from partgnn.metrics.run_summary import SUMMARY_NAME, RunSummary
from partgnn.train.items.standardisation import SCALER_FILE
from partgnn.train.run_directory.checkpoints import LAST, step_of

#: The entries a run writes in its directory (and ``--replace`` removes). Others, e.g. the
#: scores a user wrote beside the run, are left alone; in the folders (``checkpoints``, ``tb``)
#: only the files a run writes there go (:data:`RUN_FOLDER_FILES`).
RUN_ENTRIES = (
    "checkpoints", "tb", "metrics.csv", SUMMARY_NAME, "config.yaml", SCALER_FILE,
    "feature_scaler.json",  # SCALER_FILE's name in runs of earlier versions
)  # fmt: skip
#: The files a run writes in its folders, by their names: checkpoints (and the temporary files
#: of one being written when the run was killed), TensorBoard's event files (at any depth).
RUN_FOLDER_FILES = {
    "checkpoints": re.compile(r"(last|step-\d+)\.pt|\.(last|step-\d+)\.pt\..+\.tmp"),
    "tb": re.compile(r"events\.out\.tfevents\..+"),
}

#: The option of ``partgnn train`` that replaces a run.
REPLACE_OPTION = "--replace"


@dataclass(frozen=True)
class ExistingRun:
    """The run a directory holds.

    Attributes:
        directory: The run directory.
        newest_step: The step of its newest step checkpoint (``None``: no step file).
        has_checkpoint: Whether it holds any checkpoint file.
        has_summary: Whether it holds a ``summary.json`` (a finished run's).
        summary: That summary (``None``: none, or unreadable).
        metric_rows: Rows of its ``metrics.csv``.
    """

    directory: Path
    newest_step: int | None
    has_checkpoint: bool
    has_summary: bool
    summary: RunSummary | None
    metric_rows: int

    @property
    def finished(self) -> bool:
        """Whether the run wrote its summary (it ran all its steps)."""
        return self.has_summary and (self.summary is None or self.summary.stopped_by is None)

    def describe(self) -> str:
        """E.g. ``finished, 60 steps`` or ``checkpoint at step 40``."""
        if self.finished:
            steps = "?" if self.summary is None else self.summary.steps
            return f"finished, {steps} steps"
        if self.newest_step is not None:
            return f"checkpoint at step {self.newest_step}"
        if self.has_checkpoint:
            return "a checkpoint"
        return f"{self.metric_rows} rows of metrics.csv"


def existing_run(directory: str | os.PathLike[str]) -> ExistingRun | None:
    """The run ``directory`` holds, or ``None`` when it holds nothing a user would lose."""
    directory = Path(directory)
    checkpoints = directory / "checkpoints"
    steps = [step_of(p) for p in checkpoints.glob("step-*.pt") if p.is_file()]
    has_checkpoint = bool(steps) or (checkpoints / LAST).is_file()
    # An unreadable summary.json is a user's result all the same.
    has_summary = (directory / SUMMARY_NAME).exists()
    summary = _read_summary(directory / SUMMARY_NAME) if has_summary else None
    rows = _metric_rows(directory / "metrics.csv")
    if not (has_checkpoint or has_summary or rows):
        return None
    newest = max(steps) if steps else None
    return ExistingRun(directory, newest, has_checkpoint, has_summary, summary, rows)


def refusal(run: ExistingRun) -> str:
    """The one line refusing to start a new run over ``run``."""
    if run.has_checkpoint:
        advice = f"continue it with --resume, or start a new one there with {REPLACE_OPTION}"
    else:
        advice = f"it has no checkpoint to resume from: start a new one with {REPLACE_OPTION}"
    return (
        f"{run.directory}: holds a run ({run.describe()}); {advice} (removes the old run's files)"
    )


def clear_run(directory: str | os.PathLike[str]) -> list[Path]:
    """Removes the entries a run writes (:data:`RUN_ENTRIES`) from ``directory``; returns them.

    Only the run's own entries go: other files there (scores, evaluations) are kept, and so is
    ``config.yaml``, which the new run replaces with its own unless it holds the same config (it
    may be the very file the run was started with: ``--config RUN_DIR/config.yaml``). In the
    run's folders only the files a run writes go (:data:`RUN_FOLDER_FILES`): a checkpoint of
    the user's own (``checkpoints/best-by-hand.pt``), a note in ``tb/`` stay, and so does the
    folder that holds them (returned are the folders removed whole and the files removed).
    """
    removed = []
    for name in RUN_ENTRIES:
        if name == "config.yaml":
            continue
        path = Path(directory) / name
        if path.is_dir() and not path.is_symlink():
            removed += _clear_run_folder(path, RUN_FOLDER_FILES[name])
        elif path.exists() or path.is_symlink():
            path.unlink()
            removed.append(path)
    return removed


def kept_in_run_folders(directory: str | os.PathLike[str]) -> list[Path]:
    """The files in a run's folders (``checkpoints``, ``tb``) that a run does not write."""
    kept = []
    for name, written in RUN_FOLDER_FILES.items():
        folder = Path(directory) / name
        if folder.is_dir() and not folder.is_symlink():
            kept += [
                path for path in sorted(folder.rglob("*"))
                if not path.is_dir() and not written.fullmatch(path.name)
            ]  # fmt: skip
    return kept


def _clear_run_folder(folder: Path, written: re.Pattern[str]) -> list[Path]:
    """Removes the files of ``folder`` (at any depth) whose names ``written`` matches, then the
    folders left empty; returns ``[folder]`` when all of it went, else the files removed."""
    removed = []
    for path in sorted(folder.rglob("*"), reverse=True):  # files before their folders
        if path.is_dir() and not path.is_symlink():
            if not any(path.iterdir()):
                path.rmdir()
        elif written.fullmatch(path.name):
            path.unlink()
            removed.append(path)
    if not any(folder.iterdir()):
        folder.rmdir()
        return [folder]
    return removed


def _read_summary(path: Path) -> RunSummary | None:
    try:
        return RunSummary.read(path)
    except InputError:
        return None


def _metric_rows(path: Path) -> int:
    try:
        with open(path, newline="") as handle:
            return sum(1 for _ in csv.DictReader(handle))
    except (OSError, csv.Error, UnicodeDecodeError):
        return 0
