"""The PNG plots of the comparison report: curves, grouped bars, memory and cost."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import colormaps

# The object-oriented API (no pyplot) draws with Agg and never needs a display.
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from partgnn.data.files.output_files import atomic_output
from partgnn.data.files.output_kinds import plot_metadata
from partgnn.metrics.evaluation_results import EVALUATION_NAME
from partgnn.metrics.report.runs import NAN, RunRecord
from partgnn.metrics.report.text import fmt

#: Markers per run (cycled), so runs whose curves coincide (halo = full) stay distinguishable.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


#: An RGBA colour of matplotlib.
Colour = tuple[float, float, float, float]


@dataclass
class Plot:
    """One PNG of the report: its file name, heading, caption and drawing function."""

    file: str
    title: str
    caption: str
    draw: Callable[[list[RunRecord], list[Colour]], Figure]


def report_plots(runs: list[RunRecord]) -> list[Plot]:
    """The report's PNGs for ``runs``, in report order (not drawn yet)."""
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
    return plots


def write_plots(runs: list[RunRecord], out_dir: Path) -> list[Plot]:
    """Draws the report's PNGs into ``out_dir``; returns them in report order."""
    plots = report_plots(runs)
    colours = [_colour(i) for i in range(len(runs))]
    for plot in plots:
        figure = plot.draw(runs, colours)
        with atomic_output(out_dir / plot.file) as tmp:
            # The temporary name does not end in .png, so the format is given.
            figure.savefig(tmp, format="png", dpi=120, metadata=plot_metadata("png"))
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
    spec: str,
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
        ax.bar_label(bars, labels=[fmt(v, spec) for v in values], fontsize=8, padding=2)
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
    _grouped_bars(ax, runs, series, spec=".3f", inches_per_run=0.85 * width / len(runs))
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
            ax.bar_label(bars, labels=[fmt(m, ".0f") for m in memory], fontsize=7, padding=2)
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
    for ax, (title, label, values, spec) in zip(axes, panels, strict=True):
        heights = [0.0 if math.isnan(v) else v for v in values]
        bars = ax.bar(positions, heights, 0.6, color=colours[: len(runs)])
        ax.bar_label(bars, labels=[fmt(v, spec) for v in values], fontsize=8, padding=2)
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
    figures = (
        (lambda e: e.track.efficiency, "track efficiency", 2),
        (lambda e: e.track.spanning_efficiency, "spanning sectors", 6),
        (lambda e: e.track.contained_efficiency, "inside one sector", 9),
        (lambda e: e.track.fake_rate, "fake rate", 3),
        (lambda e: e.track.duplicate_rate, "duplicate rate", 1),
        (lambda e: e.track.trackml_score, "TrackML score", 4),
    )
    series = [
        (label, [r.evaluated(figure) for r in runs], palette(c)) for figure, label, c in figures
    ]
    _grouped_bars(ax, runs, series, spec=".3f", inches_per_run=0.85 * width / len(runs))
    ax.set_ylim(0, 1.15)
    ax.legend(fontsize=8, loc="upper center", ncol=3, bbox_to_anchor=(0.5, 1.0))
    ax.set_title("Track metrics (evaluation.json); track efficiency split by sectors spanned")
    return figure
