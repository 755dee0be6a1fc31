"""Whether the launched world size fits a run config's shards, checked before any collective."""

from __future__ import annotations

from partgnn.distributed.launch_env import detect_launcher
from partgnn.errors import InputError
from partgnn.partition.shard_reader import ShardDirectory
from partgnn.train.config.sections import TrainConfig
from partgnn.train.strategies import mode_facts


def check_world_size(config: TrainConfig) -> int | None:
    """Checks, before any collective, that the shards fit the launched world size.

    Returns:
        The graph-parallel group size (the shards' P) of a shard-reading mode, else ``None``.

    Raises:
        InputError: If the world size does not match the shard directory's P (or a multiple of
            it, in a mode of several graph groups).
    """
    facts = mode_facts(config.mode)
    if not facts.reads_shards:
        return None
    shards = ShardDirectory(config.data.shards)
    world_size = detect_launcher().world_size
    if world_size is None:
        return shards.n_parts
    fits = world_size == shards.n_parts or (facts.graph_groups and world_size % shards.n_parts == 0)
    if not fits:
        raise InputError(
            f"{config.data.shards}: shards are for {shards.n_parts} ranks but the world size is "
            f"{world_size} (re-partition with --parts {world_size} or launch {shards.n_parts} "
            "processes)"
        )
    return shards.n_parts
