"""The markdown tables of the comparison report: one row per run."""

from __future__ import annotations

# The object-oriented API (no pyplot) draws with Agg and never needs a display.
from partgnn.metrics.report.runs import RunRecord
from partgnn.metrics.report.text import cell, fmt, percent


def summary_table(runs: list[RunRecord]) -> list[str]:
    """The summary table, one row per run, as markdown lines."""
    with_tracks = any(run.evaluation is not None for run in runs)
    header = [
        ("run", "l"),
        ("mode", "l"),
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
                cell(run.name),
                run.mode_label,
                run.ranks_label,
                str(run.steps),
                fmt(run.final("val_loss"), ".4f"),
                fmt(run.final("val_efficiency"), ".4f"),
                fmt(run.final("val_purity"), ".4f"),
                fmt(run.final("val_boundary_efficiency"), ".4f"),
                fmt(run.final("val_interior_efficiency"), ".4f"),
                *(
                    [
                        fmt(run.evaluated("track", "efficiency"), ".4f"),
                        fmt(run.evaluated("track", "spanning_efficiency"), ".4f"),
                    ]
                    if with_tracks
                    else []
                ),
                fmt(run.step_time_ms, ".1f"),
                fmt(run.peak_memory_mb, ".0f"),
                fmt(run.mb_exchanged, ".2f"),
                percent(run.replicated_nodes),
                percent(run.replicated_edges),
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
        [cell(run.name), *(fmt(run.evaluated(s, k), ".4f") for _, s, k in columns)] for run in runs
    ]
    return _table(header, rows)


def _table(header: list[tuple[str, str]], rows: list[list[str]]) -> list[str]:
    align = {"l": ":---", "r": "---:"}
    return [
        "| " + " | ".join(label for label, _ in header) + " |",
        "| " + " | ".join(align[a] for _, a in header) + " |",
        *("| " + " | ".join(row) + " |" for row in rows),
    ]
