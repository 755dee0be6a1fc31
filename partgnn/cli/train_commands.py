"""``partgnn train``: run a training configuration on the launched processes."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

# Light imports only: torch loads when the command runs.
from partgnn.errors import InputError

if TYPE_CHECKING:
    from partgnn.train.config import TrainConfig


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
    train.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    train.set_defaults(run=run_train)


def run_train(args: argparse.Namespace) -> int:
    from partgnn.distributed.process_group import destroy_distributed, init_distributed
    from partgnn.train.config import load_config
    from partgnn.train.trainer import Trainer

    config = load_config(args.config, args.set)
    graph_parallel_size = check_world_size(config)
    context = init_distributed(
        device=config.run.device,
        timeout_s=config.run.timeout_s,
        graph_parallel_size=graph_parallel_size,
    )
    try:
        summary = Trainer(config, context).fit(resume=args.resume)
    finally:
        destroy_distributed(context)
    if context.is_main:
        final = summary.get("final") or {}
        shown = {k: v for k, v in final.items() if isinstance(v, float)}
        print(f"trained {summary['steps']} steps ({config.mode}) -> {config.run.dir}")
        print(json.dumps(shown, indent=2, sort_keys=True))
    return 0


def check_world_size(config: TrainConfig) -> int | None:
    """Checks, before any collective, that the shards fit the launched world size.

    Returns:
        The graph-parallel group size (the shards' P) for halo and naive modes, else ``None``.

    Raises:
        InputError: If the world size does not match the shard directory's P.
    """
    from partgnn.distributed.process_group import detect_launcher
    from partgnn.partition.shards import ShardDirectory

    if config.mode not in ("halo", "naive"):
        return None
    shards = ShardDirectory(config.data.shards)
    world_size = detect_launcher().world_size
    if world_size is None:
        return shards.n_parts
    fits = world_size == shards.n_parts or (
        config.mode == "halo" and world_size % shards.n_parts == 0
    )
    if not fits:
        raise InputError(
            f"{config.data.shards}: shards are for {shards.n_parts} ranks but the world size is "
            f"{world_size} (re-partition with --parts {world_size} or launch {shards.n_parts} "
            "processes)"
        )
    return shards.n_parts
