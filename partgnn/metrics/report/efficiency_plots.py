"""The plots the field reads an edge classifier by: efficiency against pT and eta, the impure
(fake) rate against eta, and the target edge efficiency in r-z (``partgnn evaluate --plots``).

Each rate is drawn with its binomial standard error from the evaluation's own items
(:mod:`partgnn.metrics.efficiency_tallies`), pooled over the events (the printed target edge
efficiency is the events' mean of theirs; its pooled counts are ``n_target_selected`` of
``n_target_edges``). Beside the PNGs, ``plotted.json`` holds what each
plot shows, read back from the drawn artists (the points, their error bars, the colour map's
cells) with the items counted in each bin, so what was drawn can be checked against the
evaluation's numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# The object-oriented API (no pyplot) draws with Agg and never needs a display.
from matplotlib.figure import Figure

from partgnn.data.files.output_kinds import plot_metadata
from partgnn.metrics.efficiency_tallies import BinnedRate, EfficiencyTallies, binned_rate

#: The file beside the PNGs that holds the plotted values.
PLOTTED_FILE = "plotted.json"
#: eta bins (values beyond +-4 fall in the outer bins).
ETA_EDGES = np.linspace(-4.0, 4.0, 17)
#: The r-z map's bins [mm]: TrackML's barrel and end caps.
Z_EDGES = np.linspace(-3000.0, 3000.0, 31)
R_EDGES = np.linspace(0.0, 1100.0, 23)


def pt_edges(pt_min: float, pt_max: float | None) -> np.ndarray:
    """pT bins [GeV] from the target threshold up (the last holds everything above it)."""
    steps = np.array([0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0])
    upper = np.inf if pt_max is None else pt_max
    inside = steps[(steps > pt_min) & (steps < upper)]
    top = [pt_max] if pt_max is not None else [max(100.0, 2 * inside[-1] if len(inside) else 1)]
    return np.concatenate([[pt_min], inside, top])


@dataclass(frozen=True)
class RatePlot:
    """One plot of a rate in bins of one variable."""

    file: str
    title: str
    xlabel: str
    ylabel: str
    rate: BinnedRate
    log_x: bool = False
    #: The y range 0 to 1 (efficiencies), else 0 to just above the highest point (small rates).
    unit_range: bool = True


def efficiency_plots(
    tallies: EfficiencyTallies, *, pt_min: float, pt_max: float | None
) -> list[RatePlot]:
    """The binned rates of ``tallies``: edge and track efficiency against pT and eta, the
    impure rate against eta."""
    t = tallies.joined
    pts = pt_edges(pt_min, pt_max)
    kept, matched, impure = t("edge_kept"), t("particle_matched"), t("track_impure")
    return [
        RatePlot("edge_efficiency_pt.png", "Target edge efficiency", "particle pT [GeV]",
                 "efficiency", binned_rate(t("edge_pt"), kept, pts), log_x=True),
        RatePlot("edge_efficiency_eta.png", "Target edge efficiency", "eta", "efficiency",
                 binned_rate(t("edge_eta"), kept, ETA_EDGES)),
        RatePlot("track_efficiency_pt.png", "Track efficiency (double majority)",
                 "particle pT [GeV]", "efficiency", binned_rate(t("particle_pt"), matched, pts),
                 log_x=True),
        RatePlot("track_efficiency_eta.png", "Track efficiency (double majority)", "eta",
                 "efficiency", binned_rate(t("particle_eta"), matched, ETA_EDGES)),
        RatePlot("impure_rate_eta.png", "Impure (fake) track rate", "track eta",
                 "impure rate", binned_rate(t("track_eta"), impure, ETA_EDGES),
                 unit_range=False),
    ]  # fmt: skip


def write_efficiency_plots(
    tallies: EfficiencyTallies,
    folder: Path,
    *,
    pt_min: float,
    pt_max: float | None,
    subtitle: str,
) -> list[Path]:
    """Draws the plots into ``folder`` (PNGs and :data:`PLOTTED_FILE`).

    Args:
        tallies: The evaluation's items.
        folder: Where the files go (a staging folder: the caller replaces the output whole).
        pt_min, pt_max: The target particles' pT band [GeV].
        subtitle: What was evaluated, under each title (events, cut, tracks).

    Returns:
        The files written.
    """
    written, plotted = [], {}
    for plot in efficiency_plots(tallies, pt_min=pt_min, pt_max=pt_max):
        figure = _draw_rate(plot, subtitle)
        plotted[plot.file] = {**_drawn_points(figure), **_counts(plot.rate)}
        written.append(_save(figure, folder / plot.file))
    z, r, kept = tallies.joined("edge_z"), tallies.joined("edge_r"), tallies.joined("edge_kept")
    figure, cells = _draw_rz(z, r, kept, subtitle)
    plotted["edge_efficiency_rz.png"] = cells
    written.append(_save(figure, folder / "edge_efficiency_rz.png"))
    (folder / PLOTTED_FILE).write_text(json.dumps(plotted, indent=1) + "\n")
    return [*written, folder / PLOTTED_FILE]


def _draw_rate(plot: RatePlot, subtitle: str) -> Figure:
    figure = Figure(figsize=(6.4, 4.4), layout="constrained")
    ax = figure.add_subplot()
    rate = plot.rate
    low, high = rate.edges[:-1], rate.edges[1:]
    # (a log axis centres each bin at its geometric mean)
    centres = np.sqrt(low * np.maximum(high, low)) if plot.log_x else 0.5 * (low + high)
    if plot.log_x:
        ax.set_xscale("log")
    half_widths = [centres - rate.edges[:-1], rate.edges[1:] - centres]
    ax.errorbar(centres, rate.rate, yerr=rate.error, xerr=half_widths, fmt="o", ms=4,
                capsize=2, color="tab:blue")  # fmt: skip
    top = 1.05
    if not plot.unit_range:
        highest = np.nanmax(rate.rate + rate.error, initial=0.0)
        top = float(min(1.05, max(0.05, 1.3 * highest)))
    ax.set(xlabel=plot.xlabel, ylabel=plot.ylabel, ylim=(0.0, top))
    ax.set_title(f"{plot.title}\n{subtitle}", fontsize=10)
    ax.grid(alpha=0.3)
    return figure


def _drawn_points(figure: Figure) -> dict[str, Any]:
    """The points and error bars as drawn (read from the figure's error bar container)."""
    container = figure.axes[0].containers[0]
    line = container.lines[0]
    x, y = line.get_xdata(), line.get_ydata()
    # (the vertical bars: the second LineCollection, each segment from y - e to y + e; an
    # empty bin's point is not drawn and has none)
    bars = container.lines[2][1].get_segments()
    errors = [float((seg[1][1] - seg[0][1]) / 2) for seg in bars if len(seg) == 2]
    return {"x": _floats(x), "y": _floats(y), "yerr": errors}


def _counts(rate: BinnedRate) -> dict[str, Any]:
    return {"edges": _floats(rate.edges), "passed": rate.passed.tolist(),
            "total": rate.total.tolist()}  # fmt: skip


def _draw_rz(
    z: np.ndarray, r: np.ndarray, kept: np.ndarray, subtitle: str
) -> tuple[Figure, dict[str, Any]]:
    """The target edge efficiency in (z, r) cells; empty cells left blank."""
    zi = np.clip(np.searchsorted(Z_EDGES, z, side="right") - 1, 0, len(Z_EDGES) - 2)
    ri = np.clip(np.searchsorted(R_EDGES, r, side="right") - 1, 0, len(R_EDGES) - 2)
    shape = (len(R_EDGES) - 1, len(Z_EDGES) - 1)
    total = np.zeros(shape, dtype=np.int64)
    passed = np.zeros(shape, dtype=np.int64)
    np.add.at(total, (ri, zi), 1)
    np.add.at(passed, (ri, zi), kept.astype(np.int64))
    efficiency = np.ma.masked_where(total == 0, passed / np.maximum(total, 1))
    figure = Figure(figsize=(8.0, 4.2), layout="constrained")
    ax = figure.add_subplot()
    mesh = ax.pcolormesh(Z_EDGES, R_EDGES, efficiency, vmin=0.0, vmax=1.0, cmap="viridis")
    figure.colorbar(mesh, ax=ax, label="target edge efficiency")
    ax.set(xlabel="z [mm]", ylabel="r [mm]")
    ax.set_title(f"Target edge efficiency in r-z (edge midpoints)\n{subtitle}", fontsize=10)
    drawn = mesh.get_array()
    cells = {
        "z_edges": _floats(Z_EDGES), "r_edges": _floats(R_EDGES),
        "efficiency": [[None if drawn.mask[i, j] else float(drawn[i, j])
                        for j in range(shape[1])] for i in range(shape[0])],
        "passed": passed.tolist(), "total": total.tolist(),
    }  # fmt: skip
    return figure, cells


def _save(figure: Figure, path: Path) -> Path:
    figure.savefig(path, format="png", dpi=110, metadata=plot_metadata("png"))
    return path


def _floats(values: Any) -> list[float | None]:
    return [None if not np.isfinite(v) else float(v) for v in np.asarray(values, dtype=float)]
