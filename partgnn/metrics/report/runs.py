"""A training run as the report reads it: metrics.csv, summary.json, evaluation.json."""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

# The object-oriented API (no pyplot) draws with Agg and never needs a display.
from partgnn.errors import InputError, first_line
from partgnn.yaml_files import load_yaml

#: The evaluation ``partgnn evaluate`` stores in a run directory (optional).
EVALUATION_NAME = "evaluation.json"


#: metrics.csv columns without which a file is not a training log.
REQUIRED_COLUMNS = ("epoch", "step", "train_loss", "val_loss")


#: Bytes per MB in the "exchanged" numbers (memory is in the trainer's MB, i.e. MiB).
BYTES_PER_MB = 1e6


NAN = float("nan")


@dataclass(frozen=True)
class RecordedMode:
    """What a run's summary says of its training mode (the facts its strategy declared,
    :class:`partgnn.train.modes.ModeFacts`, recorded as ``mode_facts``).

    Attributes:
        name: The mode (``halo``, ``overlapping``...).
        phrase: The mode in a sentence (``halo exchange``).
        exact: The run computed the full-graph trajectory (a reference for the sector runs).
        one_process: The mode runs on one process.
        loses_cut_edges: Each rank trained on a sector without the edges that cross its
            boundary (all of them, or those beyond a margin).
    """

    name: str
    phrase: str
    exact: bool
    one_process: bool
    loses_cut_edges: bool

    @classmethod
    def of_summary(cls, summary: dict[str, Any], where: Path) -> RecordedMode:
        """The mode of a summary.json: its ``mode_facts``, or for a summary written before
        they were recorded, the facts of its mode's name then (``strategy`` ``overlap``: the
        overlapping sectors trained in mode naive).

        Raises:
            InputError: No mode, or facts that are not those of a mode.
        """
        facts = summary.get("mode_facts")
        if facts is None:
            name = summary.get("strategy") or summary.get("mode")
            facts = _FACTS_BEFORE_RECORDED.get(name) if isinstance(name, str) else None
            if facts is None:
                raise InputError(
                    f"{where}: no 'mode_facts' and no known 'mode' (is it a partgnn training "
                    "summary?)"
                )
        try:
            return cls(**{key: facts[key] for key in _RECORDED_KEYS})
        except (KeyError, TypeError):
            raise InputError(
                f"{where}: 'mode_facts' lacks one of {', '.join(_RECORDED_KEYS)}"
            ) from None


_RECORDED_KEYS = ("name", "phrase", "exact", "one_process", "loses_cut_edges")

#: The facts of the modes summaries named before they recorded them (partgnn before 2026-12-02).
_FACTS_BEFORE_RECORDED: dict[str, dict[str, Any]] = {
    name: dict(zip(_RECORDED_KEYS, values, strict=True))
    for name, values in {
        "full": ("full", "the full graph", True, True, False),
        "ddp": ("ddp", "data parallelism", False, False, False),
        "halo": ("halo", "halo exchange", True, False, False),
        "naive": ("naive", "naive sectorisation", False, False, True),
        "overlap": ("overlapping", "overlapping sectors", False, False, True),
    }.items()
}


@dataclass
class RunRecord:
    """What the report needs of one run directory.

    Attributes:
        name: Label in tables and plots.
        directory: The run directory.
        mode: The training mode, as its summary records it.
        world_size: Processes of the job.
        graph_parallel_size: Ranks that share one event graph (the partition's P).
        steps: Optimizer steps trained.
        epochs: Epochs trained.
        parameters: Model parameters (``None`` if not recorded).
        wall_time_s: Training wall time [s] (NaN if not recorded).
        device: ``run.device`` of config.yaml (``None`` if unknown).
        history: metrics.csv as one float array per column (NaN where empty or absent).
        memory_per_rank: Peak memory of every rank at the last evaluation [MB].
        bytes_sent: Bytes all ranks sent in halo exchanges during training.
        boundary_true_edges: True boundary edges in the validation events (NaN if unknown).
        evaluation: The parsed evaluation.json, or ``None`` if the run was not evaluated.
        sector_margin: Hops of the overlapping sectors (0 otherwise).
        replicated_nodes: Nodes computed beyond those owned, as a fraction of the owned ones
            (halo nodes, overlap margins; NaN if not recorded).
        replicated_edges: Edges computed beyond those counted, as a fraction of the counted ones.
    """

    name: str
    directory: Path
    mode: RecordedMode
    world_size: int
    graph_parallel_size: int
    steps: int
    epochs: int
    parameters: int | None
    wall_time_s: float
    device: str | None
    history: dict[str, np.ndarray]
    memory_per_rank: list[float]
    bytes_sent: float
    boundary_true_edges: float = NAN
    evaluation: dict[str, Any] | None = None
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

    def evaluated(self, section: str, key: str) -> float:
        """A number of evaluation.json (``section`` "edge" or "track"); NaN if absent."""
        if self.evaluation is None:
            return NAN
        part = self.evaluation.get(section)
        return _number(part.get(key)) if isinstance(part, dict) else NAN

    @property
    def ranks_label(self) -> str:
        # Halo with data parallelism runs several P-rank groups; say so, else the rank count.
        if 1 < self.graph_parallel_size < self.world_size:
            return f"{self.world_size} (P={self.graph_parallel_size})"
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
    summary = _read_json(directory / "summary.json", required=True)
    summary_path = directory / "summary.json"
    mode = RecordedMode.of_summary(summary, summary_path)
    world_size = _integer(summary, "world_size", summary_path, default=1)
    communication = summary.get("communication")
    bytes_sent = (
        _number(communication.get("bytes_sent")) if isinstance(communication, dict) else NAN
    )
    if math.isnan(bytes_sent):
        bytes_sent = float(history["bytes_exchanged"][-1])
    final = summary.get("final")
    boundary_true_edges = (
        _number(final.get("val_boundary_true_edges")) if isinstance(final, dict) else NAN
    )
    parameters = summary.get("parameters")
    workload = summary.get("workload")
    workload = workload if isinstance(workload, dict) else {}
    return RunRecord(
        name=name or _directory_name(directory),
        directory=directory,
        mode=mode,
        world_size=world_size,
        graph_parallel_size=_integer(summary, "graph_parallel_size", summary_path, default=1),
        steps=_integer(summary, "steps", summary_path, default=int(history["step"][-1])),
        epochs=_integer(summary, "epochs", summary_path, default=int(history["epoch"][-1]) + 1),
        parameters=parameters if isinstance(parameters, int) else None,
        wall_time_s=_number(summary.get("wall_time_s")),
        device=_config_device(directory / "config.yaml"),
        history=history,
        memory_per_rank=memory,
        bytes_sent=bytes_sent,
        boundary_true_edges=boundary_true_edges,
        evaluation=_read_json(directory / EVALUATION_NAME, required=False),
        sector_margin=_integer(summary, "sector_margin", summary_path, default=0),
        replicated_nodes=_number(workload.get("replicated_node_fraction")),
        replicated_edges=_number(workload.get("replicated_edge_fraction")),
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


def _read_json(path: Path, *, required: bool) -> dict[str, Any] | None:
    try:
        text = path.read_text()
    except FileNotFoundError:
        if not required:
            return None
        raise InputError(
            f"{path}: not found (is {path.parent} a training run directory?)"
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read ({first_line(err)})") from None
    try:
        data = json.loads(text)  # accepts the NaN the trainer writes for undefined ratios
    except json.JSONDecodeError as err:
        raise InputError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _config_device(path: Path) -> str | None:
    # The device only qualifies the memory numbers, so an unreadable config is not an error.
    try:
        config = load_yaml(path.read_text(), where=str(path))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, InputError):
        return None
    run = config.get("run") if isinstance(config, dict) else None
    device = run.get("device") if isinstance(run, dict) else None
    return str(device) if device is not None else None


def _integer(summary: dict[str, Any], key: str, path: Path, *, default: int) -> int:
    value = summary.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{path}: {key} must be an integer (got {value!r})")
    return value


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return NAN
    return float(value)


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
