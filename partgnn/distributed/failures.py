"""Turn an exception on one rank into an error on every rank of the group, at once.

When one rank raises between two collectives, the other ranks would wait in the next collective
until the process group's timeout (30 minutes by default). :func:`agree_on_failure` is a small
collective that every rank calls at the same point, with the exception it caught there (or
``None``): if any rank failed, every rank raises - the failing ranks their own exception, the
others a :class:`PeerFailure` naming the failing ranks and their messages - and the group stays
usable.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from partgnn.distributed.context import DistContext
from partgnn.errors import PeerFailure, describe, exit_status

__all__ = ["PeerFailure", "agree_on_failure"]


def agree_on_failure(failure: BaseException | None, context: DistContext, where: str) -> None:
    """Raises on every rank of the group if ``failure`` is set on any of them.

    One all-reduce of one integer when no rank failed (on NCCL jobs over the context's gloo
    ``control_group``, so no GPU synchronisation); an all-gather of the messages when one did.
    Every rank of ``context.group`` must call it at the same point.

    Args:
        failure: The exception this rank caught since the last collective, or ``None``.
        context: The rank's distributed context (its group and device).
        where: What failed, for the message (e.g. ``"PartitionedLayer(GATConv)"``).

    Raises:
        BaseException: ``failure`` itself on a rank that failed.
        PeerFailure: On the other ranks when at least one rank failed.
    """
    if context.group_size == 1:
        if failure is not None:
            raise failure
        return
    # On the gloo control group where there is one (NCCL jobs): reading the flag then waits
    # for the other ranks' hosts, not for this rank's GPU.
    group, device = context.group, context.device
    if context.control_group is not None:
        group, device = context.control_group, torch.device("cpu")
    flag = torch.tensor([0 if failure is None else 1], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    if int(flag.item()) == 0:
        return
    report = None if failure is None else (exit_status(failure), describe(failure))
    reports: list[tuple[int, str] | None] = [None] * context.group_size
    dist.all_gather_object(reports, report, group=group)
    if failure is not None:
        raise failure
    failed = [(rank, r) for rank, r in enumerate(reports) if r is not None]
    reasons = "; ".join(f"rank {rank}: {text}" for rank, (_, text) in failed)
    raise PeerFailure(
        f"{where} failed on another rank of the group ({reasons})", exit_code=failed[0][1][0]
    )
