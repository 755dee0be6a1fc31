"""``partgnn compare``: the markdown comparison report of training runs, with PNG plots."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``compare`` to the ``partgnn`` parser."""
    compare = subparsers.add_parser(
        "compare",
        help="compare training runs: markdown report with tables and plots",
        description=(
            "Writes DIR/report.md and its PNG plots: loss, edge efficiency and purity, "
            "boundary vs interior edges, peak memory per rank, bytes exchanged and step time "
            "of each run, and what naive sectorisation loses against halo exchange. Uses a "
            "run's evaluation.json (partgnn evaluate) when present."
        ),
    )
    compare.add_argument(
        "runs", nargs="+", type=Path, metavar="RUN", help="run directories of partgnn train"
    )
    compare.add_argument("--out", type=Path, required=True, metavar="DIR", help="output directory")
    compare.add_argument(
        "--names",
        nargs="+",
        metavar="NAME",
        help="labels of the runs, one per RUN, in order (default: the directory names)",
    )
    compare.add_argument(
        "--overwrite", action="store_true",
        help="replace a report.md or plot in DIR that partgnn did not write (those of an "
        "earlier compare are replaced without it; other files in DIR are left alone)",
    )  # fmt: skip
    compare.set_defaults(run=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    """Writes the report of ``args.runs`` into ``args.out`` and prints where it is."""
    from partgnn.metrics.report import write_comparison

    report = write_comparison(args.runs, args.out, names=args.names, overwrite=args.overwrite)
    print(f"comparison report: {report}")
    return 0
