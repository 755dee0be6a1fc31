"""Pictures of a partitioned event: x-y and r-z views, one colour per part.

Halo nodes (owned by one rank, held as halo by another) are ringed in black and cut edges drawn
in red, so a user sees where naive sectorisation would cut tracks and what the exchange moves.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.collections import LineCollection

# The object-oriented API (no pyplot) draws with Agg and never needs a display.
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from partgnn.data.files.output_files import atomic_output
from partgnn.data.files.output_kinds import plot_metadata


def plot_partition(
    pos: np.ndarray,
    assignment: np.ndarray,
    edge_index: np.ndarray,
    out: str | os.PathLike[str],
    *,
    title: str = "",
) -> None:
    """Draws one partitioned event graph to a PNG file.

    Args:
        pos: Hit positions x, y, z [mm], shape ``(N, 3)``.
        assignment: Part of every node, shape ``(N,)``.
        edge_index: Global edges, shape ``(2, E)`` (only cut edges are drawn).
        out: Output PNG path.
        title: Figure title.
    """
    pos = np.asarray(pos, dtype=np.float64)
    assignment = np.asarray(assignment)
    edge_index = np.asarray(edge_index)
    n_parts = int(assignment.max()) + 1 if assignment.size else 1
    colours = colormaps["tab20" if n_parts > 10 else "tab10"]
    cut = assignment[edge_index[0]] != assignment[edge_index[1]]
    boundary = np.unique(edge_index[:, cut])
    r = np.hypot(pos[:, 0], pos[:, 1])
    views = (("x [mm]", "y [mm]", pos[:, 0], pos[:, 1]), ("z [mm]", "r [mm]", pos[:, 2], r))
    figure = Figure(figsize=(14, 6.5))
    axes = figure.subplots(1, 2)
    for ax, (xlabel, ylabel, u, v) in zip(axes, views, strict=True):
        ax.scatter(
            u,
            v,
            c=assignment % colours.N,
            cmap=colours,
            vmin=0,
            vmax=colours.N - 1,
            s=2,
            linewidths=0,
            rasterized=True,
        )
        ax.scatter(
            u[boundary],
            v[boundary],
            s=10,
            facecolors="none",
            edgecolors="black",
            linewidths=0.4,
            rasterized=True,
            label=f"halo nodes ({boundary.size})",
        )
        segments = np.stack(
            [
                np.stack([u[edge_index[0, cut]], v[edge_index[0, cut]]], axis=1),
                np.stack([u[edge_index[1, cut]], v[edge_index[1, cut]]], axis=1),
            ],
            axis=1,
        )
        ax.add_collection(
            LineCollection(
                segments,
                colors="red",
                linewidths=0.5,
                rasterized=True,
                label=f"cut edges ({int(cut.sum())})",
            )
        )
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.autoscale()
        if ax is axes[0]:
            ax.set_aspect("equal")
        ax.legend(loc="upper right", fontsize=8)
    handles = [
        Line2D([], [], marker="o", linestyle="", color=colours(k % colours.N), label=f"part {k}")
        for k in range(min(n_parts, 20))
    ]
    figure.legend(handles=handles, loc="lower center", ncol=min(n_parts, 10), fontsize=8)
    figure.suptitle(title)
    figure.tight_layout(rect=(0, 0.06, 1, 0.97))
    with atomic_output(out) as tmp:
        # The temporary name does not end in the format's suffix, so the format is given.
        fmt = Path(out).suffix.lstrip(".").lower() or "png"
        figure.savefig(tmp, format=fmt, dpi=120, metadata=plot_metadata(fmt))
