"""Benchmark of learning-rate scaling with the number of graph groups (issue 13): the learning
curve (validation loss per epoch) of halo training with G = 1, 2, 4 groups and
``optim.lr_scaling`` none / linear / sqrt, on the same events, seed and epochs; with
``--train-seeds``, every run once per training seed (initialisation and event order), the
validation loss given as mean +- standard deviation over them.

With G groups a step trains G events and an epoch has 1/G of the steps; without scaling the
model moves less per epoch. Events as in tools/bench_balance.py (pile-up drawn in a range,
METIS shards; one rank per group here). Prints markdown; ``--record`` puts the last epoch's
validation losses on the current-figures page:

    .venv/bin/python tools/bench_lr_scaling.py --events 34 --epochs 6 --train-seeds 0 1 2
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np
from _common import ToolParser, record_table
from _group_runs import mean_sd, train_halo, write_varied_events


def main() -> None:
    parser = ToolParser(__doc__, figures="parallelism")
    parser.add_argument("--events", type=int, default=34, help="events (2 of them validation)")
    parser.add_argument("--pileup-min", type=int, default=140)
    parser.add_argument("--pileup-max", type=int, default=200)
    parser.add_argument("--pt-min", type=float, default=1.0)
    parser.add_argument("--groups", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--scalings", nargs="+", default=["none", "linear", "sqrt"])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--steps", type=int, default=4, help="message-passing steps")
    parser.add_argument("--seed", type=int, default=0, help="seed of the simulated events")
    parser.add_argument(
        "--train-seeds", type=int, nargs="+", default=None,
        help="training seeds (initialisation, event order); default: --seed",
    )  # fmt: skip
    parser.tiny(
        events=4,
        pileup_min=3,
        pileup_max=6,
        groups=[2],
        scalings=["linear"],
        epochs=1,
        hidden=8,
        steps=1,
    )
    args = parser.parse_args()

    runs = [(1, "none")] if 1 in args.groups else []
    runs += [(g, s) for g in args.groups if g > 1 for s in args.scalings]
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        shards, sizes = write_varied_events(
            folder, events=args.events, pileup=(args.pileup_min, args.pileup_max),
            pt_min=args.pt_min, parts=1, seed=args.seed,
        )  # fmt: skip
        print(
            f"{args.events} events (pile-up {args.pileup_min}-{args.pileup_max}, pT > "
            f"{args.pt_min:g} GeV, {min(sizes):,}-{max(sizes):,} edges), 2 for validation; "
            f"lr {args.lr:g} (AdamW, 5 warm-up steps, cosine), H = {args.hidden}, {args.steps} "
            f"steps; {args.epochs} epochs; {os.cpu_count()} cores, one thread per rank\n"
        )
        seeds = args.train_seeds or [args.seed]
        results = {}
        for groups, scaling in runs:
            results[groups, scaling] = [
                _train(folder, shards, groups, scaling, seed, args) for seed in seeds
            ]
    names = [f"G={g} {s}" for g, s in results]
    curves = [np.array([r["val_loss"] for r in per_seed]) for per_seed in results.values()]
    if len(seeds) > 1:
        print(f"validation loss: mean +- sd over training seeds {seeds}\n")
    print("| epoch | " + " | ".join(f"val loss, {n}" for n in names) + " |")
    print("|---|" + "---|" * len(names))
    for epoch in range(args.epochs):
        print(f"| {epoch + 1} | " + " | ".join(mean_sd(c[:, epoch]) for c in curves) + " |")
    steps = [str(per_seed[0]["steps"]) for per_seed in results.values()]
    print("| optimizer steps | " + " | ".join(steps) + " |")
    record_table(
        args.record, "lr_scaling",
        f"Graph x data parallelism: the validation loss after {args.epochs} epochs with G graph "
        f"groups and the learning rate scaled by G (linear, sqrt) or not, mean over training "
        f"seeds {', '.join(map(str, seeds))} ({args.events} events of pile-up "
        f"{args.pileup_min}-{args.pileup_max}, pT > {args.pt_min:g} GeV, lr {args.lr:g})",
        [
            {"groups": groups, "scaling": scaling,
             "val_loss": float(np.mean([r["val_loss"][-1] for r in per_seed]))}
            for (groups, scaling), per_seed in results.items()
        ],
        row_label="G = {groups}", column_label="{scaling}", cell="{val_loss:.3f}",
    )  # fmt: skip


def _train(
    folder: Path, shards: Path, groups: int, scaling: str, seed: int, args: argparse.Namespace
) -> dict:
    config = {
        "data": {"shards": str(shards), "val_events": 2},
        "model": {"hidden": args.hidden, "steps": args.steps},
        "optim": {"epochs": args.epochs, "warmup_steps": 5, "lr": args.lr,
                  "lr_scaling": scaling},
        "run": {"seed": seed},
    }  # fmt: skip
    return train_halo(folder, f"g{groups}-{scaling}-{seed}", groups, config)


if __name__ == "__main__":
    main()
