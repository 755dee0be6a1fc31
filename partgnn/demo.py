"""``make demo``: the pipeline on a small default dataset, on the CPU, end to end.

Runs the same ``partgnn`` sub-commands a user would (simulate, build-graphs, and the real
TrackML sample event when it is beside the repository) and prints their statistics.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from partgnn.cli.main import main as partgnn_main
from partgnn.data.paths import trackml_sample_dir


def run(out: Path, *, events: int, pileup: float, seed: int) -> int:
    """Runs the demo pipeline into ``out``; returns the first non-zero exit code, else 0."""
    out.mkdir(parents=True, exist_ok=True)
    steps = [
        [
            "simulate",
            "--events",
            str(events),
            "--pileup",
            f"{pileup:g}",
            "--seed",
            str(seed),
            "--out",
            str(out / "events.h5"),
        ],
        [
            "build-graphs",
            str(out / "events.h5"),
            "--out",
            str(out / "graphs-ptmin1.h5"),
            "--pt-min",
            "1.0",
        ],
        ["build-graphs", str(out / "events.h5"), "--out", str(out / "graphs-all.h5")],
    ]
    sample = trackml_sample_dir()
    if (sample / "event000000001-hits.csv.gz").exists():
        steps += [
            ["import-trackml", str(sample), "--out", str(out / "trackml-sample.h5")],
            [
                "build-graphs",
                str(out / "trackml-sample.h5"),
                "--out",
                str(out / "trackml-sample-graphs.h5"),
                "--pt-min",
                "1.0",
            ],
        ]
    for step in steps:
        print(f"\n$ partgnn {' '.join(step)}", flush=True)
        code = partgnn_main(step)
        if code:
            return code
    print(f"\ndemo outputs in {out}/")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m partgnn.demo", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("demo-output"))
    parser.add_argument("--events", type=int, default=4)
    parser.add_argument("--pileup", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    return run(args.out, events=args.events, pileup=args.pileup, seed=args.seed)


if __name__ == "__main__":
    sys.exit(main())
