"""The comparison report of training runs: a markdown file with tables, PNG plots and findings.

It answers what halo exchange buys over naive sectorisation (boundary-edge efficiency) and what
each costs (step time, peak memory per rank, bytes exchanged), from the files of run directories.
"""

from __future__ import annotations

import csv
import json
import math
import os
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from matplotlib import colormaps

# The object-oriented API (no pyplot) draws with Agg and never needs a display.
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from partgnn.data.storage import atomic_output
from partgnn.errors import InputError, first_line

#: Name of the report inside the output directory; the PNGs lie beside it.
REPORT_NAME = "report.md"
#: The evaluation ``partgnn evaluate`` stores in a run directory (optional).
EVALUATION_NAME = "evaluation.json"
#: metrics.csv columns without which a file is not a training log.
REQUIRED_COLUMNS = ("epoch", "step", "train_loss", "val_loss")
#: Bytes per MB in the "exchanged" numbers (memory is in the trainer's MB, i.e. MiB).
BYTES_PER_MB = 1e6
#: Markers per run (cycled), so runs whose curves coincide (halo = full) stay distinguishable.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")

NAN = float("nan")

#: An RGBA colour of matplotlib.
Colour = tuple[float, float, float, float]


@dataclass
class RunRecord:
    """What the report needs of one run directory.

    Attributes:
        name: Label in tables and plots.
        directory: The run directory.
        mode: Training mode (full, halo, naive, ddp).
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
        strategy: ``full``, ``ddp``, ``halo``, ``naive`` or ``overlap`` (naive mode on sectors
            extended by ``sector_margin`` hops); the mode for runs that predate it.
        sector_margin: Hops of the overlapping sectors (0 otherwise).
        replicated_nodes: Nodes computed beyond those owned, as a fraction of the owned ones
            (halo nodes, overlap margins; NaN if not recorded).
        replicated_edges: Edges computed beyond those counted, as a fraction of the counted ones.
    """

    name: str
    directory: Path
    mode: str
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
    strategy: str = ""
    sector_margin: int = 0
    replicated_nodes: float = NAN
    replicated_edges: float = NAN

    def __post_init__(self) -> None:
        if not self.strategy:
            self.strategy = self.mode

    @property
    def strategy_label(self) -> str:
        """The strategy as tables show it, e.g. ``overlap k=9``."""
        if self.strategy == "overlap":
            return f"overlap k={self.sector_margin}"
        return self.strategy

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


def write_comparison(
    run_dirs: Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    *,
    names: Sequence[str] | None = None,
) -> Path:
    """Writes the comparison report of training runs: ``out_dir/report.md`` and its PNGs.

    The plots are written first and the report last, each atomically, so a report that exists
    links only to plots that exist.

    Args:
        run_dirs: Run directories written by ``partgnn train`` (config.yaml, metrics.csv,
            summary.json; evaluation.json when ``partgnn evaluate`` stored one).
        out_dir: Output directory (created).
        names: Labels of the runs, one per directory (default: the directory names, made unique).

    Returns:
        The path of ``report.md``.

    Raises:
        InputError: If no run is given, the names do not fit the runs, or a run directory lacks
            or has a malformed metrics.csv / summary.json (evaluation.json when present).
    """
    if not run_dirs:
        raise InputError("compare needs at least one run directory")
    paths = [Path(d) for d in run_dirs]
    labels = _run_names(paths, names)
    runs = [load_run(path, name=label) for path, label in zip(paths, labels, strict=True)]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = write_plots(runs, out_dir)
    report = out_dir / REPORT_NAME
    with atomic_output(report) as tmp:
        tmp.write_text(render_report(runs, plots, out_dir))
    return report


# ------------------------------------------------------------------------------- reading runs


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
    mode = summary.get("mode")
    if not isinstance(mode, str) or not mode:
        raise InputError(f"{summary_path}: no 'mode' field (is it a partgnn training summary?)")
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
    strategy = summary.get("strategy")
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
        strategy=strategy if isinstance(strategy, str) else "",
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
        config = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
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


def _run_names(paths: list[Path], names: Sequence[str] | None) -> list[str]:
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


# ------------------------------------------------------------------------------------- plots


@dataclass
class Plot:
    """One PNG of the report: its file name, heading, caption and drawing function."""

    file: str
    title: str
    caption: str
    draw: Callable[[list[RunRecord], list[Colour]], Figure]


def write_plots(runs: list[RunRecord], out_dir: Path) -> list[Plot]:
    """Draws the report's PNGs into ``out_dir``; returns them in report order."""
    plots = [
        Plot(
            "loss.png",
            "Loss",
            "Weighted BCE per epoch: training (mean over the epoch's steps) and validation. "
            "Where curves coincide (halo reproduces full), the earlier run shows as a wider rim.",
            _plot_loss,
        ),
        Plot(
            "efficiency_purity.png",
            "Edge efficiency and purity",
            "Validation edge efficiency and purity at each evaluation (score cut 0.5).",
            _plot_efficiency_purity,
        ),
        Plot(
            "boundary_interior.png",
            "Boundary vs interior edges",
            "Final validation efficiency on edges that cross the partition boundary and on "
            "interior edges: what a sector without halo loses.",
            _plot_boundary_interior,
        ),
        Plot("memory.png", "Peak memory per rank", "Peak memory of every rank.", _plot_memory),
        Plot(
            "cost.png",
            "Communication and step time",
            "Bytes sent in halo exchanges by all ranks during training, and the median time "
            "of an optimizer step.",
            _plot_cost,
        ),
    ]
    if any(run.evaluation is not None for run in runs):
        caption = f"From each run's {EVALUATION_NAME} (`partgnn evaluate`); n/a: not evaluated."
        plots.append(Plot("tracks.png", "Track metrics", caption, _plot_tracks))
    colours = [_colour(i) for i in range(len(runs))]
    for plot in plots:
        figure = plot.draw(runs, colours)
        with atomic_output(out_dir / plot.file) as tmp:
            # The temporary name does not end in .png, so the format is given.
            figure.savefig(tmp, format="png", dpi=120)
    return plots


def _colour(index: int) -> Colour:
    palette = colormaps["tab10"]
    return palette(index % palette.N)


def _line_width(index: int, n_runs: int) -> float:
    # Earlier runs are drawn wider so a later run on the same curve (halo = full) leaves a rim.
    return 1.5 + 2.5 * (n_runs - 1 - index) / max(n_runs - 1, 1)


def _plot_loss(runs: list[RunRecord], colours: list[Colour]) -> Figure:
    panels = (
        ("Training loss (mean over the epoch)", "weighted BCE", "train_loss"),
        ("Validation loss", "weighted BCE", "val_loss"),
    )
    return _plot_curves(runs, colours, panels, sharey=True)


def _plot_efficiency_purity(runs: list[RunRecord], colours: list[Colour]) -> Figure:
    panels = (
        ("Validation edge efficiency", "edge efficiency", "val_efficiency"),
        ("Validation edge purity", "edge purity", "val_purity"),
    )
    return _plot_curves(runs, colours, panels, sharey=False)


def _plot_curves(
    runs: list[RunRecord],
    colours: list[Colour],
    panels: tuple[tuple[str, str, str], ...],
    *,
    sharey: bool,
) -> Figure:
    """One panel per metrics.csv column vs epoch, one curve per run, the legend outside."""
    figure = Figure(figsize=(12, 4.5), layout="constrained")
    axes = figure.subplots(1, len(panels), sharex=True, sharey=sharey)
    for ax, (title, ylabel, column) in zip(axes, panels, strict=True):
        for i, run in enumerate(runs):
            epoch = run.history["epoch"]
            ax.plot(
                epoch,
                run.history.get(column, np.full(epoch.size, NAN)),
                color=colours[i],
                marker=MARKERS[i % len(MARKERS)],
                linewidth=_line_width(i, len(runs)),
                markersize=5,
                label=run.name,
            )
        ax.set_title(title)
        ax.set_xlabel("epoch")
        ax.set_ylabel(ylabel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        # Plain numbers: an offset axis ("+9.9e-1") hides how close to 1 the curves are.
        ax.ticklabel_format(axis="y", useOffset=False)
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    # Outside the panels, so it never hides a curve however many runs there are.
    figure.legend(handles, labels, loc="outside right upper", fontsize=8)
    return figure


def _label_runs(ax: Any, positions: np.ndarray, names: list[str], inches_per_run: float) -> None:
    """Run names as x tick labels, slanted when they would not fit side by side."""
    ax.set_xticks(positions, names)
    # About 8 characters of 10-point text fit in an inch at 120 dpi (measured on these plots).
    if max(len(n) for n in names) > 8 * inches_per_run:
        for label in ax.get_xticklabels():
            label.set(rotation=25, horizontalalignment="right", rotation_mode="anchor")


def _grouped_bars(
    ax: Any,
    runs: list[RunRecord],
    series: list[tuple[str, list[float], Colour]],
    *,
    fmt: str,
    inches_per_run: float,
) -> None:
    """Bars grouped by run, one bar per series, each labelled with its value ("n/a" for NaN)."""
    width = 0.8 / len(series)
    centres = np.arange(len(runs), dtype=np.float64)
    for k, (label, values, colour) in enumerate(series):
        heights = [0.0 if math.isnan(v) else v for v in values]
        bars = ax.bar(
            centres + (k - (len(series) - 1) / 2) * width, heights, width, label=label, color=colour
        )
        ax.bar_label(bars, labels=[_fmt(v, fmt) for v in values], fontsize=8, padding=2)
    _label_runs(ax, centres, [run.name for run in runs], inches_per_run)
    ax.margins(y=0.15)


def _plot_boundary_interior(runs: list[RunRecord], colours: list[Colour]) -> Figure:
    width = min(max(6.0, 1.6 * len(runs) + 3), 16.0)
    figure = Figure(figsize=(width, 4.5), layout="constrained")
    ax = figure.subplots()
    palette = colormaps["tab10"]
    series = [
        ("boundary edges", [r.final("val_boundary_efficiency") for r in runs], palette(3)),
        ("interior edges", [r.final("val_interior_efficiency") for r in runs], palette(0)),
        ("all edges", [r.final("val_efficiency") for r in runs], palette(7)),
    ]
    _grouped_bars(ax, runs, series, fmt=".3f", inches_per_run=0.85 * width / len(runs))
    ax.set_ylabel("validation edge efficiency")
    ax.set_ylim(0, 1.15)
    ax.legend(fontsize=8, loc="upper center", ncol=3, bbox_to_anchor=(0.5, 1.0))
    ax.set_title("Edge efficiency: boundary vs interior edges (final)")
    return figure


def _plot_memory(runs: list[RunRecord], colours: list[Colour]) -> Figure:
    n_bars = sum(max(len(r.memory_per_rank), 1) for r in runs)
    width = min(max(6.0, 0.45 * n_bars + 3), 16.0)
    figure = Figure(figsize=(width, 4.5), layout="constrained")
    ax = figure.subplots()
    # Bar slots along the axis (bars plus one-slot gaps between runs) and inches per slot.
    inches_per_slot = 0.85 * width / (n_bars + len(runs))
    position, ticks, tick_labels, centres, names = 0.0, [], [], [], []
    for i, run in enumerate(runs):
        memory = run.memory_per_rank or [run.peak_memory_mb]
        x = position + np.arange(len(memory))
        bars = ax.bar(x, memory, 0.8, color=colours[i])
        if n_bars <= 24:
            ax.bar_label(bars, labels=[_fmt(m, ".0f") for m in memory], fontsize=7, padding=2)
        # Rank numbers under the bars; with many ranks only some, so they stay legible.
        every = max(1, math.ceil(len(memory) / 8))
        for rank in range(0, len(memory), every):
            ticks.append(x[rank])
            tick_labels.append(str(rank))
        centres.append(float(x.mean()))
        # A long name is wrapped (at hyphens and spaces) to the width of its group.
        chars = max(6, int(8 * inches_per_slot * (len(memory) + 1)))
        names.append(textwrap.fill(run.name, chars))
        position += len(memory) + 1  # a gap between runs
    ax.set_xticks(ticks, tick_labels, fontsize=8)
    # The run names as a second row of labels below the rank numbers (no legend to hide bars).
    groups = ax.secondary_xaxis("bottom")
    groups.set_xticks(centres, names)
    groups.tick_params(length=0, pad=16)
    groups.spines["bottom"].set_visible(False)
    groups.set_xlabel("rank, grouped by run")
    ax.set_ylabel("peak memory [MB]")
    ax.margins(y=0.12)
    ax.set_title("Peak memory per rank")
    return figure


def _plot_cost(runs: list[RunRecord], colours: list[Colour]) -> Figure:
    width = min(max(8.0, 1.8 * len(runs) + 4), 16.0)
    figure = Figure(figsize=(width, 4.5), layout="constrained")
    axes = figure.subplots(1, 2)
    panels = (
        (
            "Halo-exchange traffic",
            "MB sent (all ranks, whole run)",
            [r.mb_exchanged for r in runs],
            ".2f",
        ),
        ("Optimizer step time", "median step time [ms]", [r.step_time_ms for r in runs], ".1f"),
    )
    positions = np.arange(len(runs))
    for ax, (title, label, values, fmt) in zip(axes, panels, strict=True):
        heights = [0.0 if math.isnan(v) else v for v in values]
        bars = ax.bar(positions, heights, 0.6, color=colours[: len(runs)])
        ax.bar_label(bars, labels=[_fmt(v, fmt) for v in values], fontsize=8, padding=2)
        _label_runs(ax, positions, [run.name for run in runs], 0.4 * width / len(runs))
        ax.set_ylabel(label)
        ax.set_title(title)
        ax.margins(y=0.15)
    return figure


def _plot_tracks(runs: list[RunRecord], colours: list[Colour]) -> Figure:
    width = min(max(7.0, 2.0 * len(runs) + 3), 16.0)
    figure = Figure(figsize=(width, 4.5), layout="constrained")
    ax = figure.subplots()
    palette = colormaps["tab10"]
    keys = (
        ("efficiency", "track efficiency", 2),
        ("spanning_efficiency", "spanning sectors", 6),
        ("contained_efficiency", "inside one sector", 9),
        ("fake_rate", "fake rate", 3),
        ("duplicate_rate", "duplicate rate", 1),
        ("trackml_score", "TrackML score", 4),
    )
    series = [
        (label, [r.evaluated("track", key) for r in runs], palette(c)) for key, label, c in keys
    ]
    _grouped_bars(ax, runs, series, fmt=".3f", inches_per_run=0.85 * width / len(runs))
    ax.set_ylim(0, 1.15)
    ax.legend(fontsize=8, loc="upper center", ncol=3, bbox_to_anchor=(0.5, 1.0))
    ax.set_title("Track metrics (evaluation.json); track efficiency split by sectors spanned")
    return figure


# ------------------------------------------------------------------------------------ report


def render_report(runs: list[RunRecord], plots: list[Plot], out_dir: Path) -> str:
    """The markdown text of the report (plots are linked by file name, beside the report)."""
    lines = [
        f"# Run comparison: {', '.join(r.name for r in runs)}",
        "",
        "What does halo exchange buy over naive sectorisation, and what does each cost? Quality "
        "numbers are validation metrics at each run's last evaluation (metrics.csv); costs are "
        "over the whole run.",
        "",
        "## Runs",
        "",
    ]
    for run in runs:
        lines.append(f"- {_run_line(run, out_dir)}")
    lines += ["", "## Summary", "", *summary_table(runs), ""]
    lines += [
        "Edge efficiency and purity at score cut 0.5 on the validation events; in naive runs "
        "the boundary edges a sector cannot score count as missed. Step time: median over the "
        "evaluated epochs of the mean optimizer-step time. Peak memory: CUDA peak allocation on "
        "GPU runs, peak process RSS on CPU runs (including the Python and PyTorch baseline), "
        "largest over the ranks. Exchanged: bytes sent by all ranks in halo exchanges during "
        "training (1 MB = 10^6 bytes). n/a: not defined or not recorded.",
        "",
        "## Findings",
        "",
    ]
    lines += [f"- {sentence}" for sentence in findings(runs)]
    lines += ["", "## Plots", ""]
    for plot in plots:
        lines += [f"### {plot.title}", "", f"![{plot.title}]({plot.file})", "", plot.caption, ""]
    evaluated = [run for run in runs if run.evaluation is not None]
    if evaluated:
        lines += [
            "## Evaluation",
            "",
            f"From the runs' {EVALUATION_NAME} (`partgnn evaluate`): edge metrics of the scored "
            "events in their global edge order, and tracks built from them.",
            "",
            *evaluation_table(evaluated),
            "",
        ]
    return "\n".join(lines)


def _run_line(run: RunRecord, out_dir: Path) -> str:
    try:
        link = Path(os.path.relpath(run.directory.resolve(), out_dir.resolve())).as_posix()
    except ValueError:  # another drive on Windows: no relative path
        link = run.directory.resolve().as_posix()
    parts = [
        f"mode {run.mode}" + (f", {run.strategy_label}" if run.strategy != run.mode else ""),
        f"{run.ranks_label} rank{'s' if run.world_size != 1 else ''}",
        f"{run.steps} steps in {run.epochs} epochs",
    ]
    if run.parameters is not None:
        parts.append(f"{run.parameters:,} parameters")
    if not math.isnan(run.wall_time_s):
        parts.append(f"{run.wall_time_s:.1f} s wall time")
    if run.device:
        parts.append(f"device {run.device}")
    if run.evaluation is not None:
        parts.append(f"evaluated ({EVALUATION_NAME})")
    if " " in link:  # CommonMark takes a link destination with spaces only in <...>
        link = f"<{link}>"
    return f"**{_cell(run.name)}**: [`{run.directory}`]({link}): {', '.join(parts)}"


def summary_table(runs: list[RunRecord]) -> list[str]:
    """The summary table, one row per run, as markdown lines."""
    with_tracks = any(run.evaluation is not None for run in runs)
    header = [
        ("run", "l"),
        ("strategy", "l"),
        ("ranks", "r"),
        ("steps", "r"),
        ("val loss", "r"),
        ("edge eff.", "r"),
        ("purity", "r"),
        ("boundary-edge eff.", "r"),
        ("interior-edge eff.", "r"),
        *([("track eff.", "r"), ("spanning-track eff.", "r")] if with_tracks else []),
        ("step (ms)", "r"),
        ("peak MB/rank (max)", "r"),
        ("MB exchanged", "r"),
        ("replicated nodes", "r"),
        ("replicated edges", "r"),
    ]
    rows = []
    for run in runs:
        rows.append(
            [
                _cell(run.name),
                run.strategy_label,
                run.ranks_label,
                str(run.steps),
                _fmt(run.final("val_loss"), ".4f"),
                _fmt(run.final("val_efficiency"), ".4f"),
                _fmt(run.final("val_purity"), ".4f"),
                _fmt(run.final("val_boundary_efficiency"), ".4f"),
                _fmt(run.final("val_interior_efficiency"), ".4f"),
                *(
                    [
                        _fmt(run.evaluated("track", "efficiency"), ".4f"),
                        _fmt(run.evaluated("track", "spanning_efficiency"), ".4f"),
                    ]
                    if with_tracks
                    else []
                ),
                _fmt(run.step_time_ms, ".1f"),
                _fmt(run.peak_memory_mb, ".0f"),
                _fmt(run.mb_exchanged, ".2f"),
                _percent(run.replicated_nodes),
                _percent(run.replicated_edges),
            ]
        )
    return _table(header, rows)


def evaluation_table(runs: list[RunRecord]) -> list[str]:
    """The evaluation.json numbers of the evaluated runs, as markdown lines."""
    columns = (
        ("edge eff.", "edge", "efficiency"),
        ("purity", "edge", "purity"),
        ("AUC", "edge", "auc"),
        ("boundary-edge eff.", "edge", "boundary_efficiency"),
        ("interior-edge eff.", "edge", "interior_efficiency"),
        ("target eff.", "edge", "target_efficiency"),
        ("track eff.", "track", "efficiency"),
        ("spanning-track eff.", "track", "spanning_efficiency"),
        ("contained-track eff.", "track", "contained_efficiency"),
        ("fake rate", "track", "fake_rate"),
        ("duplicate rate", "track", "duplicate_rate"),
        ("TrackML score", "track", "trackml_score"),
    )
    header = [("run", "l"), *((label, "r") for label, _, _ in columns)]
    rows = [
        [_cell(run.name), *(_fmt(run.evaluated(s, k), ".4f") for _, s, k in columns)]
        for run in runs
    ]
    return _table(header, rows)


def _table(header: list[tuple[str, str]], rows: list[list[str]]) -> list[str]:
    align = {"l": ":---", "r": "---:"}
    return [
        "| " + " | ".join(label for label, _ in header) + " |",
        "| " + " | ".join(align[a] for _, a in header) + " |",
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


# ---------------------------------------------------------------------------------- findings


def findings(runs: list[RunRecord]) -> list[str]:
    """Sentences that answer the report's question from the numbers.

    For every sector run (naive, or overlapping sectors), the reference is a halo run of the
    same P (else any halo run, else a full run): what the sectors lose on boundary edges, over
    all edges and on tracks that span sectors, what they win (every metric on which the sector
    run is better is named), and what each costs in step time, memory, bytes and replicated
    work. Every halo run is also checked against a full run (they should agree: the exchange is
    exact).
    """
    sectors = [r for r in runs if r.strategy in ("naive", "overlap")]
    halo = [r for r in runs if r.mode == "halo"]
    full = [r for r in runs if r.mode == "full"]
    sentences = []
    for run in sectors:
        reference = _reference(run, halo, full)
        if reference is None:
            continue
        sentences += _sectors_vs_reference(run, reference)
    if full:
        sentences += [_halo_vs_full(run, full[0]) for run in halo]
    if not sentences:
        sentences.append(
            "No sectors-vs-halo comparison: it needs a naive or overlap run and a halo or full "
            f"run (modes here: {', '.join(sorted({r.mode for r in runs}))})."
        )
    return sentences


def _reference(run: RunRecord, halo: list[RunRecord], full: list[RunRecord]) -> RunRecord | None:
    same_p = [h for h in halo if h.graph_parallel_size == run.graph_parallel_size]
    for candidates in (same_p, halo, full):
        if candidates:
            return candidates[0]
    return None


def _who(run: RunRecord) -> str:
    if run.strategy == "overlap":
        what = f"Overlapping sectors of {run.sector_margin} hops"
    else:
        what = "Naive sectorisation"
    return f"{what} (`{run.name}`, P={run.graph_parallel_size})"


def _sectors_vs_reference(sector: RunRecord, ref: RunRecord) -> list[str]:
    x = sector.final("val_boundary_efficiency")
    y = ref.final("val_boundary_efficiency")
    who = _who(sector)
    vs = f"{_MODE_PHRASE.get(ref.mode, ref.mode)} (`{ref.name}`)"
    edges = ""
    if not math.isnan(sector.boundary_true_edges) and sector.boundary_true_edges > 0:
        edges = f", of {sector.boundary_true_edges:.0f} boundary true edges in the validation set"
    if math.isnan(x) or math.isnan(y) or y <= 0:
        sentences = [
            f"{who}: boundary-edge efficiency {_fmt(x, '.3f')} vs {_fmt(y, '.3f')} for {vs} "
            "(no loss fraction: a boundary efficiency is not defined)."
        ]
    elif x < y - SAME_WITHIN:
        # Relative to what the reference finds: the boundary true edges halo exchange recovers.
        sentences = [
            f"{who} loses {100.0 * (y - x) / y:.1f}% of the boundary true edges that {vs} "
            f"finds (boundary-edge efficiency {x:.3f} vs {y:.3f}{edges})."
        ]
    elif x > y + SAME_WITHIN:
        sentences = [
            f"{who} finds more boundary true edges than {vs}: boundary-edge efficiency "
            f"{x:.4f} vs {y:.4f}{edges}; {sector.name} wins on boundary edges."
        ]
    else:
        sentences = [
            f"{who} finds as many boundary true edges as {vs} (boundary-edge efficiency "
            f"{x:.4f} vs {y:.4f}{edges}, within {SAME_WITHIN:g})."
        ]
    overall = (
        f"Overall edge efficiency {_fmt(sector.final('val_efficiency'), '.4f')} vs "
        f"{_fmt(ref.final('val_efficiency'), '.4f')} and interior-edge efficiency "
        f"{_fmt(sector.final('val_interior_efficiency'), '.4f')} vs "
        f"{_fmt(ref.final('val_interior_efficiency'), '.4f')} ({sector.name} vs {ref.name})"
    )
    if _close(
        sector.final("val_interior_efficiency"), ref.final("val_interior_efficiency")
    ) and sector.final("val_efficiency") < ref.final("val_efficiency"):
        overall += ": the loss is confined to the edges the sectors cut"
    sentences.append(overall + ".")
    quality = [
        ("overall edge efficiency", sector.final("val_efficiency"), ref.final("val_efficiency")),
        ("edge purity", sector.final("val_purity"), ref.final("val_purity")),
        (
            "interior-edge efficiency",
            sector.final("val_interior_efficiency"),
            ref.final("val_interior_efficiency"),
        ),
    ]
    track = ("efficiency", "spanning_efficiency", "contained_efficiency")
    t_sector = [sector.evaluated("track", key) for key in track]
    t_ref = [ref.evaluated("track", key) for key in track]
    if not (math.isnan(t_sector[0]) or math.isnan(t_ref[0])):
        text = f"Track efficiency {t_sector[0]:.4f} ({sector.name}) vs {t_ref[0]:.4f} ({ref.name})"
        if not (math.isnan(t_sector[1]) or math.isnan(t_ref[1])):
            n_spanning = sector.evaluated("track", "n_spanning_targets")
            text += (
                f"; for the {_fmt(n_spanning, '.0f')} particles whose hits span several sectors "
                f"{t_sector[1]:.4f} vs "
                f"{t_ref[1]:.4f}, for particles inside one sector "
                f"{_fmt(t_sector[2], '.4f')} vs {_fmt(t_ref[2], '.4f')}"
            )
        sentences.append(text + ".")
        quality += [
            ("track efficiency", t_sector[0], t_ref[0]),
            ("spanning-track efficiency", t_sector[1], t_ref[1]),
            ("contained-track efficiency", t_sector[2], t_ref[2]),
        ]
        fake = (sector.evaluated("track", "fake_rate"), ref.evaluated("track", "fake_rate"))
        quality.append(("fake rate", -fake[0], -fake[1]))
    known = [(name, a, b) for name, a, b in quality if not (math.isnan(a) or math.isnan(b))]
    wins = [name for name, a, b in known if a > b + SAME_WITHIN]
    if wins:
        sentences.append(
            f"{sector.name} is better than {ref.name} (by more than {SAME_WITHIN:g}) on: "
            f"{', '.join(wins)}."
        )
    cost = (
        f"Cost of {ref.name} over {sector.name}: step time {_fmt(ref.step_time_ms, '.1f')} vs "
        f"{_fmt(sector.step_time_ms, '.1f')} ms"
    )
    ratio = ref.step_time_ms / sector.step_time_ms if sector.step_time_ms > 0 else NAN
    if not math.isnan(ratio):
        cost += f" ({ratio:.2f}x)"
    cost += (
        f", peak memory per rank {_fmt(ref.peak_memory_mb, '.0f')} vs "
        f"{_fmt(sector.peak_memory_mb, '.0f')} MB, {_fmt(ref.mb_exchanged, '.2f')} MB exchanged"
    )
    if ref.steps > 0 and not math.isnan(ref.mb_exchanged):
        cost += f" ({ref.mb_exchanged / ref.steps:.3f} MB per step)"
    cost += f" vs {_fmt(sector.mb_exchanged, '.2f')} MB"
    if not (math.isnan(sector.replicated_edges) or math.isnan(ref.replicated_edges)):
        cost += (
            f"; replicated nodes {_percent(ref.replicated_nodes)} vs "
            f"{_percent(sector.replicated_nodes)} and edges {_percent(ref.replicated_edges)} vs "
            f"{_percent(sector.replicated_edges)} of the owned ones"
        )
    sentences.append(cost + ".")
    cheaper = [
        name
        for name, a, b in (
            ("step time", sector.step_time_ms, ref.step_time_ms),
            ("peak memory per rank", sector.peak_memory_mb, ref.peak_memory_mb),
            ("bytes exchanged", sector.mb_exchanged, ref.mb_exchanged),
            ("replicated edges", sector.replicated_edges, ref.replicated_edges),
        )
        if not (math.isnan(a) or math.isnan(b)) and a < b
    ]
    if cheaper:
        sentences.append(f"{sector.name} is cheaper than {ref.name} in: {', '.join(cheaper)}.")
    return sentences


#: Rates closer than this count as equal in the findings (differences below it are noise of one
#: run, e.g. one particle in a few hundred).
SAME_WITHIN = 0.001

_MODE_PHRASE = {"halo": "halo exchange", "full": "the full graph"}


def _halo_vs_full(halo: RunRecord, full: RunRecord) -> str:
    loss_h, loss_f = halo.final("val_loss"), full.final("val_loss")
    agree = "agree" if _close(loss_h, loss_f, tolerance=1e-3) else "differ"
    return (
        f"Halo exchange (`{halo.name}`, P={halo.graph_parallel_size}) and the full graph "
        f"(`{full.name}`) {agree}: "
        f"final val loss {_fmt(loss_h, '.4f')} vs {_fmt(loss_f, '.4f')}, edge efficiency "
        f"{_fmt(halo.final('val_efficiency'), '.4f')} vs "
        f"{_fmt(full.final('val_efficiency'), '.4f')}; peak memory per rank "
        f"{_fmt(halo.peak_memory_mb, '.0f')} vs "
        f"{_fmt(full.peak_memory_mb, '.0f')} MB."
    )


def _close(a: float, b: float, *, tolerance: float = 1e-6) -> bool:
    return not (math.isnan(a) or math.isnan(b)) and abs(a - b) <= tolerance * max(1.0, abs(b))


def _percent(value: float) -> str:
    """A fraction as a signed percentage (``+12.5%``); n/a when not recorded."""
    return "n/a" if value is None or math.isnan(value) else f"{100 * value:+.1f}%"


def _fmt(value: float, spec: str) -> str:
    """A number for the report; NaN (undefined or not recorded) is "n/a"."""
    return "n/a" if value is None or math.isnan(value) else format(value, spec)


def _cell(text: str) -> str:
    # A "|" in a run name would split the table cell.
    return text.replace("|", "\\|")
