"""Benchmark of balanced work across graph groups: how long ranks wait at the gradient
all-reduce, with and without size-bucketed sampling, on events whose pile-up varies (issue 13).

Simulates ``--events`` events with a whole pile-up drawn uniformly in ``[--pileup-min,
--pileup-max]`` (seeded), builds their graphs (``--pt-min`` cut), partitions them (METIS,
``--parts`` ranks per group) and trains halo mode with ``--groups`` graph groups under
``torchrun`` (one thread per rank), once per sampling (``random``, ``size_buckets``), with the
same seed. Prints markdown for docs/BENCHMARKS.md:

    .venv/bin/python tools/bench_balance.py --events 18 --groups 2 --epochs 6

Gradient wait fraction: per rank, the seconds in the gradient reduction (waiting for the slowest
group of the step, then the all-reduce itself) over the seconds of its steps (forward, backward,
reduction, AdamW); the trainer's ``summary.json``, ``workload``. Learning curve: the validation
loss after each epoch (``metrics.csv``).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np
from _group_runs import train_halo, write_varied_events

SAMPLINGS = ("random", "size_buckets")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=18, help="events (2 of them validation)")
    parser.add_argument("--pileup-min", type=int, default=140)
    parser.add_argument("--pileup-max", type=int, default=200)
    parser.add_argument("--pt-min", type=float, default=1.0)
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--parts", type=int, default=1, help="ranks per graph group")
    parser.add_argument("--buckets", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--steps", type=int, default=4, help="message-passing steps")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        shards, sizes = write_varied_events(
            folder, events=args.events, pileup=(args.pileup_min, args.pileup_max),
            pt_min=args.pt_min, parts=args.parts, seed=args.seed,
        )  # fmt: skip
        print(
            f"{args.events} events (pile-up {args.pileup_min:g}-{args.pileup_max:g}, pT > "
            f"{args.pt_min:g} GeV): {min(sizes):,}-{max(sizes):,} edges (max/min "
            f"{max(sizes) / min(sizes):.2f}); {args.groups} groups x {args.parts} ranks, "
            f"{args.buckets} size buckets; H = {args.hidden}, {args.steps} steps; "
            f"{args.epochs} epochs; {os.cpu_count()} cores, one thread per rank\n"
        )
        results = {sampling: _train(folder, shards, sampling, args) for sampling in SAMPLINGS}
    print("| sampling | steps | mean step s | gradient wait fraction (mean / max over ranks) |")
    print("|---|---|---|---|")
    for sampling, result in results.items():
        waiting = result["waiting"]
        print(
            f"| {sampling} | {result['steps']} | {result['step_s']:.3f} | "
            f"{np.mean(waiting):.3f} / {max(waiting):.3f} |"
        )
    random_wait = np.mean(results["random"]["waiting"])
    bucket_wait = np.mean(results["size_buckets"]["waiting"])
    print(
        f"\nsize_buckets / random: wait fraction {bucket_wait / random_wait:.2f}x, step time "
        f"{results['size_buckets']['step_s'] / results['random']['step_s']:.2f}x\n"
    )
    print("| epoch | " + " | ".join(f"val loss, {s}" for s in SAMPLINGS) + " |")
    print("|---|" + "---|" * len(SAMPLINGS))
    for epoch in range(args.epochs):
        losses = [results[s]["val_loss"][epoch] for s in SAMPLINGS]
        print(f"| {epoch + 1} | " + " | ".join(f"{loss:.4f}" for loss in losses) + " |")


def _train(folder: Path, shards: Path, sampling: str, args: argparse.Namespace) -> dict:
    config = {
        "data": {"shards": str(shards), "val_events": 2},
        "model": {"hidden": args.hidden, "steps": args.steps},
        "optim": {"epochs": args.epochs, "warmup_steps": 5},
        "run": {"seed": args.seed, "sampling": sampling, "size_buckets": args.buckets},
    }
    return train_halo(folder, sampling, args.groups * args.parts, config)


if __name__ == "__main__":
    main()
