"""Benchmark of balanced work across graph groups: how long ranks wait at the gradient
all-reduce, with and without size-bucketed sampling, on events whose pile-up varies (issue 13).

Simulates ``--events`` events with a whole pile-up drawn uniformly in ``[--pileup-min,
--pileup-max]`` (seeded), builds their graphs (``--pt-min`` cut), partitions them (METIS,
``--parts`` ranks per group) and trains halo mode with ``--groups`` graph groups under
``torchrun`` (one thread per rank), once per sampling (``random``, ``size_buckets``), with the
same seed, and repeats both for every training seed of ``--train-seeds`` (model initialisation
and event order; the events stay those of ``--seed``). Prints markdown; ``--record`` puts each
sampling's step time, gradient wait and last validation loss on the current-figures page:

    .venv/bin/python tools/bench_balance.py --events 18 --groups 2 --epochs 6 --train-seeds 0 1 2

Gradient wait fraction: per rank, the seconds in the gradient reduction (waiting for the slowest
group of the step, then the all-reduce itself) over the seconds of its steps (forward, backward,
reduction, AdamW); the trainer's ``summary.json``, ``workload``. Learning curve: the validation
loss after each epoch (``metrics.csv``); with several training seeds, the mean and the sample
standard deviation over them, and the difference size_buckets - random seed by seed.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np
from _common import ToolParser, record_table
from _group_runs import mean_sd, train_halo, write_varied_events

SAMPLINGS = ("random", "size_buckets")


def main() -> None:
    parser = ToolParser(__doc__, figures="parallelism")
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
    parser.add_argument("--seed", type=int, default=0, help="seed of the simulated events")
    parser.add_argument(
        "--train-seeds", type=int, nargs="+", default=None,
        help="training seeds (initialisation, event order); default: --seed",
    )  # fmt: skip
    parser.tiny(events=5, pileup_min=3, pileup_max=6, epochs=1, hidden=8, steps=1, buckets=2)
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
        seeds = args.train_seeds or [args.seed]
        runs = {
            sampling: [_train(folder, shards, sampling, seed, args) for seed in seeds]
            for sampling in SAMPLINGS
        }
    _print_waiting(runs)
    _print_learning_curves(runs, args.epochs, seeds)
    record_table(
        args.record, "sampling",
        f"Size-bucketed sampling against random, {args.groups} graph groups x {args.parts} "
        f"ranks, {args.events} events of pile-up {args.pileup_min}-{args.pileup_max} (pT > "
        f"{args.pt_min:g} GeV), {args.epochs} epochs, training seeds "
        f"{', '.join(map(str, seeds))}: mean step time, mean share of it waiting at the gradient "
        "all-reduce, last validation loss (mean over seeds)",
        [
            {"sampling": sampling,
             "step_s": float(np.mean([r["step_s"] for r in results])),
             "wait": float(np.mean(np.concatenate([r["waiting"] for r in results]))),
             "val_loss": float(np.mean([r["val_loss"][-1] for r in results]))}
            for sampling, results in runs.items()
        ],
        row_label="{sampling}", column_label="step time, gradient wait, validation loss",
        cell="{step_s:.3f} s, {wait:.3f}, {val_loss:.3f}",
    )  # fmt: skip


def _print_waiting(runs: dict[str, list[dict]]) -> None:
    """Steps, step time and gradient wait fraction per sampling, pooled over training seeds."""
    print(
        "| sampling | runs | steps | mean step s | gradient wait fraction (mean / max over ranks) |"
    )
    print("|---|---|---|---|---|")
    pooled = {}
    for sampling, results in runs.items():
        waiting = np.concatenate([result["waiting"] for result in results])
        step_s = float(np.mean([result["step_s"] for result in results]))
        pooled[sampling] = (float(np.mean(waiting)), step_s)
        print(
            f"| {sampling} | {len(results)} | {results[0]['steps']} | {step_s:.3f} | "
            f"{np.mean(waiting):.3f} / {np.max(waiting):.3f} |"
        )
    (random_wait, random_s), (bucket_wait, bucket_s) = pooled["random"], pooled["size_buckets"]
    print(
        f"\nsize_buckets / random: wait fraction {bucket_wait / random_wait:.2f}x, step time "
        f"{bucket_s / random_s:.2f}x\n"
    )


def _print_learning_curves(runs: dict[str, list[dict]], epochs: int, seeds: list[int]) -> None:
    """Validation loss after each epoch: one column per sampling (mean +- standard deviation
    over seeds when there are several) and the per-seed difference size_buckets - random."""
    curves = {s: np.array([r["val_loss"] for r in results]) for s, results in runs.items()}
    difference = curves["size_buckets"] - curves["random"]
    several = len(seeds) > 1
    header = [f"val loss, {s}" for s in SAMPLINGS] + ["size_buckets - random"]
    if several:
        header[-1] += f" (mean +- sd, {len(seeds)} seeds)"
    print("| epoch | " + " | ".join(header) + " |")
    print("|---|" + "---|" * len(header))
    for epoch in range(epochs):
        cells = [mean_sd(curves[s][:, epoch]) for s in SAMPLINGS]
        cells.append(mean_sd(difference[:, epoch], signed=True))
        print(f"| {epoch + 1} | " + " | ".join(cells) + " |")
    if several:
        worse = int(np.sum(difference[:, -1] > 0))
        print(
            f"\nafter epoch {epochs}: size_buckets worse than random for {worse} of "
            f"{len(seeds)} seeds"
        )


def _train(folder: Path, shards: Path, sampling: str, seed: int, args: argparse.Namespace) -> dict:
    config = {
        "data": {"shards": str(shards), "val_events": 2},
        "model": {"hidden": args.hidden, "steps": args.steps},
        "optim": {"epochs": args.epochs, "warmup_steps": 5},
        "run": {"seed": seed, "sampling": sampling, "size_buckets": args.buckets},
    }
    return train_halo(folder, f"{sampling}-{seed}", args.groups * args.parts, config)


if __name__ == "__main__":
    main()
