"""``partgnn train``: run a training configuration on the launched processes."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from partgnn import json_files
from partgnn.cli.arg_types import timeout_seconds
from partgnn.errors import InputError

if TYPE_CHECKING:
    from partgnn.train.config.sections import TrainConfig

# No pipeline imports here: torch loads when the command runs.


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``train`` to the ``partgnn`` parser."""
    train = subparsers.add_parser(
        "train",
        help="train the edge classifier (modes full, halo, naive, ddp)",
        description="Launch with torchrun / mpirun / srun for several ranks.",
    )
    train.add_argument(
        "--config",
        required=True,
        help="YAML run configuration: a path, or a shipped one by name (partgnn configs)",
    )
    train.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. --set optim.lr=0.001 (repeatable)",
    )
    train.add_argument(
        "--device",
        help="auto, cpu, cuda or cuda:N: where every rank computes (overrides run.device)",
    )
    train.add_argument(
        "--timeout",
        type=timeout_seconds,
        default=None,
        help="collective timeout [s] (default: PARTGNN_DIST_TIMEOUT, else run.timeout_s)",
    )
    start = train.add_mutually_exclusive_group()
    start.add_argument(
        "--resume",
        nargs="?",
        const=True,
        default=False,
        choices=["auto"],
        help="continue from the run directory's last checkpoint; '--resume auto' starts afresh "
        "when there is none (for torchrun --max-restarts and requeued jobs); a finished run is "
        "left as it is",
    )
    start.add_argument(
        "--replace",
        action="store_true",
        help="start afresh in a run directory that holds a run: the old run's files are removed "
        "first (without it, or --resume, that is refused)",
    )
    train.set_defaults(run=run_train)


def _refuse_changing_the_config_file(spec: str, config: TrainConfig, overrides: list[str]) -> None:
    """Refuses ``--config RUN_DIR/config.yaml`` when the run would write another config there.

    A run writes its config to ``run.dir/config.yaml``; when that is the input file, ``--set``
    values would be written into it and the same command would next time do something else.
    The run is refused unless the settings are those of the file alone (then the file is kept
    as it is: :meth:`~partgnn.train.run_directory.run_log.RunLog.write_config` leaves an equal
    config alone).
    """
    from partgnn.resources import resolve_config
    from partgnn.train.config.config_file import load_config

    path = resolve_config(spec)
    snapshot = Path(config.run.dir) / "config.yaml"
    if not snapshot.exists() or not os.path.samefile(path, snapshot) or not overrides:
        return
    if load_config(path).to_dict() != config.to_dict():
        raise InputError(
            f"{spec}: is the config the run writes in its run.dir ({config.run.dir}), and "
            f"{' '.join(overrides)} would be written into it: copy it elsewhere and give that "
            "to --config, or set run.dir to another folder"
        )


def run_train(args: argparse.Namespace) -> int:
    from partgnn.train.config.config_file import load_config
    from partgnn.train.training_run import run_training

    overrides = [*args.set, *([f"run.device={args.device}"] if args.device else [])]
    config = load_config(args.config, overrides)
    _refuse_changing_the_config_file(args.config, config, overrides)
    summary, context = run_training(
        config, resume=args.resume, replace=args.replace, timeout_s=args.timeout
    )
    if summary.already_finished:
        if context.is_main:
            print(
                f"{config.run.dir}: the run is finished ({summary.steps} of "
                f"{summary.total_steps} steps); nothing changed (--replace starts it anew)"
            )
        return 0
    if summary.stopped_by:
        if context.is_main:
            print(
                f"partgnn: stopped by {summary.stopped_by} after step {summary.steps} of "
                f"{summary.total_steps}; checkpoint written, continue with --resume auto",
                file=sys.stderr,
            )
        return 128 + int(signal.Signals[summary.stopped_by])
    if context.is_main:
        final = {} if summary.final is None else summary.final.as_row()
        shown = {k: v for k, v in final.items() if isinstance(v, float)}
        print(f"trained {summary.steps} steps ({summary.mode}) -> {config.run.dir}")
        print(json_files.dumps(shown, indent=2, sort_keys=True))
    return 0
