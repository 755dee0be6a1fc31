"""Open a rank's shard only after the whole graph-parallel group agrees the shards belong together.

Part files mixed from two partition runs (another seed, another method, another source) would
otherwise train or score silently wrong, or break inside the exchange with a communication error
on some ranks and a wait for the timeout on others. :func:`open_group_shard` is called by every
rank of the group before its first collective of a run: each rank opens its own part file (any
error is caught, not raised yet), reads its provenance and, per event, its send and receive
counts; one all-gather shares them; every rank then checks the same things in the same order, so
a problem is the same one-line :class:`~partgnn.errors.InputError` on every rank:

- a rank could not open or read its file (missing, corrupt, another rank's file);
- the files name different partition runs (method, seed, P, source checksum, run id);
- per event, rank ``r`` sends rank ``q`` as many rows as ``q`` expects from ``r``.
"""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

from partgnn.distributed.context import DistContext
from partgnn.errors import InputError, first_line
from partgnn.partition.shard_reader import ShardDirectory, ShardFile


def open_group_shard(shards: ShardDirectory, context: DistContext) -> ShardFile:
    """This rank's shard file, checked against the files of the other ranks of its group.

    A collective of the graph-parallel group (one all-gather of a few integers per event): every
    rank must call it at the same point.

    Raises:
        InputError: On every rank, when any rank's file is unreadable, or the files come from
            different partition runs, or send and receive counts disagree for an event.
    """
    shard, report = None, None
    try:
        shard = shards.open_rank(context.group_rank)
        report = _report(shard)
    except InputError as err:
        report = {"file": str(shards.directory), "error": first_line(err)}
    if context.group_size > 1:
        reports: list[Any] = [None] * context.group_size
        dist.all_gather_object(reports, report, group=context.group)
    else:
        reports = [report]
    problem = _problem(reports)
    if problem is not None:
        if shard is not None:
            shard.close()
        raise InputError(problem)
    assert shard is not None
    return shard


def _report(shard: ShardFile) -> dict[str, Any]:
    """What the group compares: the file, its partition run, its counts per event (its rank
    was checked by ``open_rank``)."""
    events = range(len(shard))
    return {
        "file": str(shard.path),
        # The file's own attributes were checked against this meta.json when it was opened.
        "provenance": shard.directory.provenance,
        "event_ids": list(shard.directory.meta.event_ids),
        "send_counts": [shard.plan_array(i, "send_counts").tolist() for i in events],
        "halo_counts": [shard.plan_array(i, "halo_counts").tolist() for i in events],
    }


def _problem(reports: list[dict[str, Any]]) -> str | None:
    """The first problem of the group's reports, or ``None``; the same on every rank."""
    for rank, report in enumerate(reports):
        if "error" in report:
            return f"rank {rank} cannot use its shard: {report['error']}"
    first = reports[0]
    for report in reports[1:]:
        for key, value in first["provenance"].items():
            if report["provenance"].get(key) != value:
                return (
                    f"{report['file']} and {first['file']} come from different partition runs "
                    f"({key} {report['provenance'].get(key)!r} vs {value!r}); re-run partgnn "
                    "partition into one directory"
                )
        if report["event_ids"] != first["event_ids"]:
            return f"{report['file']} and {first['file']}: the ranks' event lists differ"
    for index, event_id in enumerate(first["event_ids"]):
        for sender, report in enumerate(reports):
            for receiver, other in enumerate(reports):
                sent = report["send_counts"][index][receiver]
                expected = other["halo_counts"][index][sender]
                if sent != expected:
                    return (
                        f"event {event_id}: {report['file']} sends {sent} rows to rank "
                        f"{receiver} but {other['file']} expects {expected} from rank {sender} "
                        "(part files from different partitions)"
                    )
    return None
