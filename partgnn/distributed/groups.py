"""The process groups of a job: graph-parallel groups of ``P`` consecutive ranks that share
one event, data-parallel groups across them, and a gradient group per graph group."""

from __future__ import annotations

import datetime

import torch.distributed as dist

from partgnn.errors import InputError


def check_group_size(size: int | None, world_size: int, launcher: str) -> int:
    """The graph group's size ``P`` (``None``: the world size).

    Raises:
        InputError: ``size`` not a positive integer, or not a divisor of the world size.
    """
    if size is None:
        return world_size
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise InputError(f"group_size must be a positive integer (got {size!r})")
    if world_size % size:
        raise InputError(
            f"group_size {size} does not divide the world size {world_size} "
            f"(launcher {launcher}): start a multiple of {size} processes"
        )
    return size


def build_control_group(
    global_rank: int, world_size: int, group_size: int, timeout: datetime.timedelta
) -> dist.ProcessGroup | None:
    """This rank's graph group on gloo, for host-side agreement on a NCCL job (``None`` with one
    rank per graph group). Collective over the whole world, like :func:`build_groups`."""
    if group_size == 1:
        return None
    n_groups = world_size // group_size
    groups = [
        dist.new_group(list(range(g * group_size, (g + 1) * group_size)), timeout=timeout,
                       backend="gloo")
        for g in range(n_groups)
    ]  # fmt: skip
    return groups[global_rank // group_size]


def build_groups(
    global_rank: int, world_size: int, group_size: int, timeout: datetime.timedelta
) -> tuple[dist.ProcessGroup | None, dist.ProcessGroup | None, dist.ProcessGroup | None]:
    """This rank's graph-parallel, data-parallel and gradient groups.

    The gradient group has the graph group's ranks; gradients reduced in it while the backward
    pass runs never interleave with that pass's halo exchanges (a group's collectives must be
    issued in the same order on every rank). ``None``: the default group (graph), no data
    parallelism (data), one process (gradient).
    """
    n_groups = world_size // group_size
    graph_ranks = [list(range(g * group_size, (g + 1) * group_size)) for g in range(n_groups)]
    # new_group is collective over the whole world: every rank creates every group, in the
    # same order, and keeps those it belongs to.
    gradient_groups = [
        dist.new_group(ranks, timeout=timeout) for ranks in graph_ranks if group_size > 1
    ]
    gradient_group = gradient_groups[global_rank // group_size] if gradient_groups else None
    if n_groups == 1:
        return None, None, gradient_group
    graph_groups = [dist.new_group(ranks, timeout=timeout) for ranks in graph_ranks]
    data_groups = [
        dist.new_group([g * group_size + r for g in range(n_groups)], timeout=timeout)
        for r in range(group_size)
    ]
    return (
        graph_groups[global_rank // group_size],
        data_groups[global_rank % group_size],
        gradient_group,
    )
