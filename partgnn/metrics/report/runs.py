"""A training run as the report reads it: metrics.csv, summary.json, evaluation.json."""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from partgnn import json_files
from partgnn.errors import InputError, first_line
from partgnn.metrics.evaluation_results import EVALUATION_NAME, EvaluationResults
from partgnn.metrics.run_summary import SUMMARY_NAME, RecordedMode, RunSummary
from partgnn.yaml_files import load_yaml

#: metrics.csv columns without which a file is not a training log.
REQUIRED_COLUMNS = ("epoch", "step", "train_loss", "val_loss")


#: Bytes per MB in the "exchanged" numbers (memory is in the trainer's MB, i.e. MiB).
BYTES_PER_MB = 1e6


NAN = float("nan")


@dataclass
class RunRecord:
    """What the report needs of one run directory.

    Attributes:
        name: Label in tables and plots.
        directory: The run directory.
        mode: The training mode, as its summary records it.
        world_size: Processes of the job.
        group_size: Ranks of a graph group, that share one event graph (the partition's P).
        steps: Optimizer steps trained.
        epochs: Epochs trained.
        parameters: Model parameters (``None`` if not recorded).
        wall_time_s: Training wall time [s] (NaN if not recorded).
        device: ``run.device`` of config.yaml (``None`` if unknown).
        history: metrics.csv as one float array per column (NaN where empty or absent).
        memory_per_rank: Peak memory of every rank at the last evaluation [MB].
        bytes_sent: Bytes all ranks sent in halo exchanges during training.
        boundary_true_edges: True boundary edges in the validation events (NaN if unknown).
        evaluation: Its evaluation.json, or ``None`` if the run was not evaluated.
        sector_margin: Hops of the overlapping sectors (0 otherwise).
        replicated_nodes: Nodes computed beyond those owned, as a fraction of the owned ones
            (halo nodes, overlap margins; NaN if not recorded).
        replicated_edges: Edges computed beyond those counted, as a fraction of the counted ones.
    """

    name: str
    directory: Path
    mode: RecordedMode
    world_size: int
    group_size: int
    steps: int
    epochs: int
    parameters: int | None
    wall_time_s: float
    device: str | None
    history: dict[str, np.ndarray]
    memory_per_rank: list[float]
    bytes_sent: float
    boundary_true_edges: float = NAN
    evaluation: EvaluationResults | None = None
    sector_margin: int = 0
    replicated_nodes: float = NAN
    replicated_edges: float = NAN

    @property
    def mode_label(self) -> str:
        """The mode as tables show it, e.g. ``overlapping k=9``."""
        if self.sector_margin > 0:
            return f"{self.mode.name} k={self.sector_margin}"
        return self.mode.name

    def final(self, column: str) -> float:
        """The value of a metrics.csv column at the last evaluation (NaN if absent)."""
        values = self.history.get(column)
        return float(values[-1]) if values is not None and values.size else NAN

    @property
    def step_time_ms(self) -> float:
        """Median over the evaluated epochs of the mean step time [ms].

        The median, not the last epoch, so one slow epoch (warm-up, a noisy neighbour) does not
        decide the comparison.
        """
        values = self.history.get("step_time_s", np.array([]))
        values = values[np.isfinite(values)]
        return 1e3 * float(np.median(values)) if values.size else NAN

    @property
    def peak_memory_mb(self) -> float:
        """Largest peak memory over the ranks [MB]."""
        known = [m for m in self.memory_per_rank if not math.isnan(m)]
        return max(known) if known else self.final("peak_memory_mb_max")

    @property
    def mb_exchanged(self) -> float:
        return self.bytes_sent / BYTES_PER_MB

    def evaluated(self, figure: Callable[[EvaluationResults], float | None]) -> float:
        """A figure of evaluation.json, e.g. ``lambda e: e.track.efficiency``; NaN if the run
        was not evaluated or the figure is undefined."""
        return NAN if self.evaluation is None else json_files.number(figure(self.evaluation))

    @property
    def ranks_label(self) -> str:
        # Halo with data parallelism runs several P-rank groups; say so, else the rank count.
        if 1 < self.group_size < self.world_size:
            return f"{self.world_size} (P={self.group_size})"
        return str(self.world_size)


def load_run(directory: str | os.PathLike[str], *, name: str | None = None) -> RunRecord:
    """Reads one run directory.

    Args:
        directory: The run directory.
        name: Its label (default: the directory name).

    Raises:
        InputError: If metrics.csv or summary.json is missing or malformed, or evaluation.json is
            present but not a JSON object.
    """
    directory = Path(directory)
    if not directory.is_dir():
        what = "not a directory" if directory.exists() else "run directory not found"
        raise InputError(f"{directory}: {what}")
    history, memory = _read_metrics(directory / "metrics.csv")
    summary = RunSummary.read(directory / SUMMARY_NAME)
    bytes_sent = summary.bytes_sent
    if math.isnan(bytes_sent):
        bytes_sent = float(history["bytes_exchanged"][-1])
    return RunRecord(
        name=name or _directory_name(directory),
        directory=directory,
        mode=summary.recorded_mode,
        world_size=summary.world_size,
        group_size=summary.group_size,
        steps=summary.steps or int(history["step"][-1]),
        epochs=summary.epochs or int(history["epoch"][-1]) + 1,
        parameters=summary.parameters,
        wall_time_s=summary.wall_time_s,
        device=_config_device(directory / "config.yaml"),
        history=history,
        memory_per_rank=memory,
        bytes_sent=bytes_sent,
        boundary_true_edges=(
            summary.final.validation.boundary_true_edges
            if summary.final is not None and summary.final.validation is not None
            else NAN
        ),
        evaluation=EvaluationResults.read_if_present(directory / EVALUATION_NAME),
        sector_margin=summary.sector_margin,
        replicated_nodes=summary.workload.replicated_node_fraction,
        replicated_edges=summary.workload.replicated_edge_fraction,
    )


def _read_metrics(path: Path) -> tuple[dict[str, np.ndarray], list[float]]:
    """metrics.csv as float columns, and the per-rank peak memory of its last row."""
    try:
        with open(path, newline="") as handle:
            reader = csv.DictReader(handle)
            header = reader.fieldnames
            rows = list(reader)
    except FileNotFoundError:
        raise InputError(
            f"{path}: not found (is {path.parent} a training run directory?)"
        ) from None
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise InputError(f"{path}: cannot read ({first_line(err)})") from None
    if not header:
        raise InputError(f"{path}: empty file (expected a metrics.csv header)")
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise InputError(f"{path}: missing column(s) {', '.join(missing)}")
    if not rows:
        raise InputError(f"{path}: no evaluation rows (did the run finish an epoch?)")
    columns: dict[str, list[float]] = {c: [] for c in header if c != "peak_memory_mb_per_rank"}
    memory: list[float] = []
    for line, row in enumerate(rows, start=2):
        # DictReader marks a short row with None values and a long one with a None key.
        if None in row or None in row.values():
            raise InputError(f"{path}: line {line} has another number of fields than the header")
        for column, values in columns.items():
            values.append(_parse_float(row[column], path, line, column))
        if "peak_memory_mb_per_rank" in row:
            memory = [
                _parse_float(v, path, line, "peak_memory_mb_per_rank")
                for v in row["peak_memory_mb_per_rank"].split()
            ]
    history = {column: np.array(values, dtype=np.float64) for column, values in columns.items()}
    for column in ("step", "epoch"):
        if not np.isfinite(history[column]).all():
            raise InputError(f"{path}: column {column} has empty or non-finite values")
    for column in ("bytes_exchanged", "step_time_s", "peak_memory_mb_max"):
        history.setdefault(column, np.full(len(rows), NAN))
    return history, memory


def _parse_float(text: str, path: Path, line: int, column: str) -> float:
    text = text.strip()
    if not text:
        return NAN
    try:
        return float(text)
    except ValueError:
        raise InputError(f"{path}: line {line}: {column} is not a number ({text!r})") from None


def _config_device(path: Path) -> str | None:
    # The device only qualifies the memory numbers, so an unreadable config is not an error.
    try:
        config = load_yaml(path.read_text(), where=str(path))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, InputError):
        return None
    run = config.get("run") if isinstance(config, dict) else None
    device = run.get("device") if isinstance(run, dict) else None
    return str(device) if device is not None else None


def _directory_name(path: Path) -> str:
    return path.name or path.resolve().name


def run_names(paths: list[Path], names: Sequence[str] | None) -> list[str]:
    """The given names (checked), or the directory names made unique."""
    if names is not None:
        names = list(names)
        if len(names) != len(paths):
            raise InputError(f"--names gives {len(names)} names for {len(paths)} runs")
        if any(not n.strip() for n in names):
            raise InputError("--names: a name is empty")
        if len(set(names)) != len(names):
            raise InputError(f"--names: names must be unique (got {' '.join(names)})")
        return names
    labels = [_directory_name(p) for p in paths]
    # Same-named runs (runs/P2/halo, runs/P4/halo) are told apart by their parent directory,
    # and what still collides (a directory given twice) by a counter.
    labels = [
        f"{path.resolve().parent.name}/{label}"
        if labels.count(label) > 1 and path.resolve().parent.name
        else label
        for path, label in zip(paths, labels, strict=True)
    ]
    seen: dict[str, int] = {}
    unique = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        unique.append(label if seen[label] == 1 else f"{label}-{seen[label]}")
    return unique
