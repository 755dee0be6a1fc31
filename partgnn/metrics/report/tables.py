"""The markdown tables of the comparison report: one row per run."""

from __future__ import annotations

from collections.abc import Callable

from partgnn.metrics.evaluation_results import EvaluationResults
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
                        fmt(run.evaluated(lambda e: e.track.efficiency), ".4f"),
                        fmt(run.evaluated(lambda e: e.track.spanning_efficiency), ".4f"),
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
    columns: tuple[tuple[str, Callable[[EvaluationResults], float | None]], ...] = (
        ("edge eff.", lambda e: e.edge.efficiency),
        ("purity", lambda e: e.edge.purity),
        ("AUC", lambda e: e.edge.auc),
        ("boundary-edge eff.", lambda e: e.edge.boundary_efficiency),
        ("interior-edge eff.", lambda e: e.edge.interior_efficiency),
        ("target eff.", lambda e: e.edge.target_efficiency),
        ("track eff.", lambda e: e.track.efficiency),
        ("spanning-track eff.", lambda e: e.track.spanning_efficiency),
        ("contained-track eff.", lambda e: e.track.contained_efficiency),
        ("fake rate", lambda e: e.track.fake_rate),
        ("duplicate rate", lambda e: e.track.duplicate_rate),
        ("TrackML score", lambda e: e.track.trackml_score),
    )
    header = [("run", "l"), *((label, "r") for label, _ in columns)]
    rows = [
        [cell(run.name), *(fmt(run.evaluated(figure), ".4f") for _, figure in columns)]
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
