"""``partgnn compare``: the markdown comparison report of training runs, with PNG plots."""

from __future__ import annotations

import math
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

# The object-oriented API (no pyplot) draws with Agg and never needs a display.
from partgnn.data.files import output_kinds
from partgnn.data.files.output_files import atomic_output
from partgnn.errors import InputError
from partgnn.metrics.evaluation_results import EVALUATION_NAME
from partgnn.metrics.report.findings import findings
from partgnn.metrics.report.plots import Plot, report_plots, write_plots
from partgnn.metrics.report.runs import RunRecord, load_run, run_names
from partgnn.metrics.report.tables import evaluation_table, summary_table
from partgnn.metrics.report.text import cell

#: Name of the report inside the output directory; the PNGs lie beside it.
REPORT_NAME = "report.md"


def write_comparison(
    run_dirs: Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    *,
    names: Sequence[str] | None = None,
    overwrite: bool = False,
) -> Path:
    """Writes the comparison report of training runs: ``out_dir/report.md`` and its PNGs.

    The plots are written first and the report last, each atomically, so a report that exists
    links only to plots that exist.

    Args:
        run_dirs: Run directories written by ``partgnn train`` (config.yaml, metrics.csv,
            summary.json; evaluation.json when ``partgnn evaluate`` stored one).
        out_dir: Output directory (created).
        names: Labels of the runs, one per directory (default: the directory names, made unique).
        overwrite: Replace a ``report.md`` or plot in ``out_dir`` that partgnn did not write
            (the report and plots of an earlier ``compare`` are replaced without it; other
            files in ``out_dir`` are never touched).

    Returns:
        The path of ``report.md``.

    Raises:
        InputError: If no run is given, the names do not fit the runs, a run directory lacks
            or has a malformed metrics.csv / summary.json (evaluation.json when present),
            ``out_dir`` is a file, or it holds a report or plot of the same name that partgnn
            did not write (without ``overwrite``).
    """
    if not run_dirs:
        raise InputError("compare needs at least one run directory")
    paths = [Path(d) for d in run_dirs]
    labels = run_names(paths, names)
    runs = [load_run(path, name=label) for path, label in zip(paths, labels, strict=True)]
    out_dir = Path(out_dir)
    replaced = _check_replace(out_dir, report_plots(runs), overwrite=overwrite)
    if replaced:
        print(f"partgnn: compare: replacing {', '.join(replaced)} in {out_dir}", file=sys.stderr)
    created = not out_dir.exists()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        plots = write_plots(runs, out_dir)
        report = out_dir / REPORT_NAME
        with atomic_output(report) as tmp:
            tmp.write_text(render_report(runs, plots, out_dir) + "\n" + output_kinds.report_mark())
    except BaseException:
        if created:  # nothing under the output's name when it fails
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    return report


def _check_replace(out_dir: Path, plots: list[Plot], *, overwrite: bool) -> list[str]:
    """The replace rule for the report and plots to be written in ``out_dir``: the names of the
    files it replaces.

    Raises:
        InputError: ``out_dir`` is not a folder, or a file to write is there and not partgnn's
            report or plot (without ``overwrite``).
    """
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"{out_dir}: exists and is not a folder; compare writes a folder there")
    files = [(out_dir / REPORT_NAME, output_kinds.REPORT)]
    files += [(out_dir / plot.file, output_kinds.PLOT) for plot in plots]
    replaced = []
    for path, kind in files:
        line = output_kinds.check_replace(path, kind, command="compare", overwrite=overwrite)
        if line is not None:
            replaced.append(path.name + (" (--overwrite)" if line.endswith("--overwrite)") else ""))
    return replaced


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
        f"mode {run.mode_label}",
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
    return f"**{cell(run.name)}**: [`{run.directory}`]({link}): {', '.join(parts)}"
