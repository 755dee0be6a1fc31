"""One distributed run of a command: set up, tear down, and fail with one line on every rank.

:func:`distributed_session` wraps :func:`~partgnn.distributed.process_group.init_distributed`
and :func:`~partgnn.distributed.process_group.destroy_distributed`. When the body raises:

- on the rank whose own work failed (bad input, a bug), the failure is left as a notice in the
  job's store (:mod:`partgnn.distributed.failure_notices`) before the group is torn down, and the
  exception goes on unchanged;
- on a rank whose collective broke because a peer left or went silent, the exception becomes a
  :class:`~partgnn.errors.PeerFailure` "rank R failed: <R's reason>" (with R's exit status), or,
  when no rank left a notice (killed, host down), one that says the group was lost and how.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from partgnn.distributed.context import DistContext
from partgnn.distributed.failure_notices import (
    hold_store_for_readers,
    is_lost_peer,
    leave_notice,
    mark_informed,
    notice_store,
    read_notices,
    serves_store,
)
from partgnn.distributed.failure_watch import FailureWatch
from partgnn.distributed.process_group import destroy_distributed, init_distributed
from partgnn.errors import PeerFailure, describe, exit_status, first_line


@contextmanager
def distributed_session(
    *, watch_failures: bool | None = None, **options: Any
) -> Iterator[DistContext]:
    """Initialises ``torch.distributed`` for the body and destroys it afterwards.

    Args:
        watch_failures: Watch for other ranks' failure notices in the background and end this
            process with their report (:class:`~partgnn.distributed.failure_watch.FailureWatch`)
            while the body runs. Default: on NCCL, whose collectives do not raise when a peer
            is gone.
        **options: Passed to :func:`~partgnn.distributed.process_group.init_distributed`.

    Yields:
        This process's distributed context.

    Raises:
        PeerFailure: The body's collective broke because another rank failed or was lost.
        Exception: The body's own exception, after leaving its notice for the other ranks.

    .. warning::
        Collective: every process of the job enters it (see ``init_distributed``).
    """
    context = init_distributed(**options)
    if watch_failures is None:
        watch_failures = context.backend == "nccl"
    watch = FailureWatch() if watch_failures and context.global_world_size > 1 else nullcontext()
    store = None
    try:
        with watch:
            yield context
    except (Exception, KeyboardInterrupt) as err:
        explained = explain_failure(err, context)
        if explained is err:
            if _left_notice(err, context) and serves_store():
                store = notice_store()  # held: served until the others have read the notice
            elif isinstance(err, PeerFailure) and context.global_world_size > 1:
                mark_informed()  # agreed by the group: this rank reads no notice
            raise
        raise explained from err
    finally:
        destroy_distributed(context)
        if store is not None:
            hold_store_for_readers(store, context.global_rank, context.global_world_size)


def _left_notice(err: BaseException, context: DistContext) -> bool:
    """Whether :func:`explain_failure` left a notice for ``err``, this rank's own failure (a
    stop by a signal aside: every rank is stopped then, and none waits to read)."""
    return (
        context.global_world_size > 1 and isinstance(err, Exception)
        and not isinstance(err, PeerFailure) and not is_lost_peer(err)
    )  # fmt: skip


def explain_failure(err: BaseException, context: DistContext) -> BaseException:
    """What a rank that failed with ``err`` should report (leaving its notice when it is its own).

    Args:
        err: The exception the rank's work raised.
        context: The rank's distributed context.

    Returns:
        ``err`` itself for this rank's own failure (and for a :class:`PeerFailure` already
        explained by the group), else a :class:`PeerFailure` naming the lost ranks.
    """
    if isinstance(err, PeerFailure):
        return err
    if context.global_world_size > 1 and is_lost_peer(err):
        notices = read_notices()
        if notices:
            reasons = "; ".join(f"rank {n.rank} failed: {n.reason}" for n in notices)
            return PeerFailure(reasons, exit_code=notices[0].exit_code)
        return PeerFailure(
            f"rank {context.global_rank} lost contact with the other ranks and none of them left "
            f"a reason (killed, or its host is down): {first_line(err)}"
        )
    if context.global_world_size > 1:
        leave_notice(exit_status(err), describe(err))
    return err
