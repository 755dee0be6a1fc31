"""What the data path costs: epoch wall time / sum of step times, with and without the cache.

Simulates pile-up-200 events, builds pT > 1 GeV graphs and 2-rank phi shards, and trains a few
epochs in modes full (1 process), halo, naive and naive on overlapping sectors of steps + 1
hops (2 processes under torchrun), each with the
event cache on (``data.cache_mb`` default) and off (``data.cache_mb=0``: every step reads and
decodes its event, one step ahead in a background thread). Reads ``epoch_wall_s`` (everything
between the first step's start and the last step's end: data, steps, logging, checkpoints) and
``epoch_step_s`` (compute and communication) from each run's metrics.csv. Prints a markdown
table; ``--record`` puts wall time over step time per strategy and cache setting on the
current-figures page:

    .venv/bin/python tools/bench_data_path.py --out bench-data-path
"""

from __future__ import annotations

import csv
import os
import platform
from pathlib import Path

from _common import ToolParser, partgnn, record_table
from _paths import shipped_config

CONFIG = shipped_config("full")


#: The strategies timed: full (one process), halo, naive and overlapping sectors (2 ranks).
STRATEGIES = ("full", "halo", "naive", "overlap")


def main() -> None:
    parser = ToolParser(__doc__, figures="parallelism")
    parser.add_argument("--events", type=int, default=12)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("bench-data-path"))
    parser.add_argument("--pileup", type=float, default=200.0)
    parser.add_argument(
        "--strategies", nargs="+", choices=STRATEGIES, default=list(STRATEGIES),
        help="the strategies to time (default: all)",
    )  # fmt: skip
    parser.tiny(events=3, epochs=1, hidden=8, steps=1, pileup=5.0, strategies=["overlap"])
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    graphs, shards = out / "graphs.h5", out / "phi2"
    if not graphs.exists():
        _run(
            1,
            "simulate",
            "--events",
            str(args.events),
            "--pileup",
            f"{args.pileup:g}",
            "--seed",
            "3",
            "--out",
            str(out / "events.h5"),
        )
        _run(1, "build-graphs", str(out / "events.h5"), "--out", str(graphs), "--pt-min", "1.0")
    overlapping = out / f"phi2-margin{args.steps + 1}"
    for directory, margin in ((shards, 0), (overlapping, args.steps + 1)):
        if not directory.exists():
            _run(
                1,
                "partition",
                str(graphs),
                "--parts",
                "2",
                "--method",
                "phi",
                "--margin",
                str(margin),
                "--out",
                str(directory),
            )
    print(
        f"machine: {os.cpu_count()} cores ({platform.machine()}), 1 thread per rank; "
        f"{args.events - 2} training events, H = {args.hidden}, {args.steps} steps\n"
    )
    print(
        "| strategy | ranks | cache | steps | sum of step times [s] | epoch wall time [s] "
        "| wall / steps | data time per step [ms] |"
    )
    print("|---|---|---|---|---|---|---|---|")
    strategies = {
        "full": ("full", 1, shards),
        "halo": ("halo", 2, shards),
        "naive": ("naive", 2, shards),
        "overlap": ("overlapping", 2, overlapping),
    }
    measurements = []
    for strategy in args.strategies:
        mode, ranks, strategy_shards = strategies[strategy]
        for cache_mb in (1024, 0):
            run_dir = out / "runs" / f"{strategy}-cache{cache_mb}"
            overrides = [
                f"mode={mode}",
                f"data.graphs={graphs}",
                f"data.shards={strategy_shards}",
                "data.boundary_shards=null",
                "data.val_events=2",
                f"data.cache_mb={cache_mb}",
                f"model.hidden={args.hidden}",
                f"model.steps={args.steps}",
                f"optim.epochs={args.epochs}",
                f"run.eval_every={args.epochs}",
                f"run.dir={run_dir}",
                "run.progress=false",
                "run.tensorboard=false",
                "run.checkpoint_every=100000",
                "run.device=cpu",
            ]
            _run(
                ranks,
                "train",
                "--replace",
                "--config",
                str(CONFIG),
                *(a for o in overrides for a in ("--set", o)),
            )
            with open(run_dir / "metrics.csv", newline="") as handle:
                rows = list(csv.DictReader(handle))
            # One row, after the last epoch: its totals are that epoch's alone. The first
            # epoch filled the cache (and the standardisation read every event before it), so
            # the last one is the steady state a long run sees.
            last = rows[-1]
            step_s, wall_s = float(last["epoch_step_s"]), float(last["epoch_wall_s"])
            n_steps = args.events - 2
            data_ms = 1000 * float(last["data_time_s"])
            print(
                f"| {strategy} | {ranks} | {'on' if cache_mb else 'off'} | {n_steps} "
                f"| {step_s:.2f} | {wall_s:.2f} | {wall_s / step_s:.3f} | {data_ms:.1f} |"
            )
            measurements.append(
                {
                    "strategy": strategy,
                    "cache": "on" if cache_mb else "off",
                    "wall_over_steps": wall_s / step_s,
                    "data_ms": data_ms,
                }
            )
    record_table(
        args.record, "data_path",
        f"The data path: an epoch's wall time over the sum of its step times (1: no time waiting "
        f"for data), and the data time per step, in the last of {args.epochs} epochs "
        f"({args.events - 2} training events of pile-up {args.pileup:g}, pT > 1 GeV)",
        measurements, row_label="{strategy}", column_label="cache {cache}",
        cell="{wall_over_steps:.3f} ({data_ms:.1f} ms)",
    )  # fmt: skip


def _run(ranks: int, *arguments: str) -> None:
    partgnn(*arguments, ranks=ranks)


if __name__ == "__main__":
    main()
