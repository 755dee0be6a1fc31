"""A failing rank's last words, left in the rendezvous store for the ranks it leaves behind.

When a rank fails on its own (bad input, a bug) and leaves, the other ranks only see their next
collective break ("Connection reset by peer") or time out; the reason is on another machine's
stderr. So the failing rank writes one line - its exit status and reason - under
``partgnn/failed/<global rank>`` in the job's store before it tears its process group down, and
a rank whose collective broke reads the notices and reports "rank R failed: <reason>" instead of
a communication traceback.

The store is the default process group's: under torchrun it is served by torchrun's agent (so a
notice outlives its writer, and keys are per restart attempt), under the other launchers by
global rank 0: when rank 0 itself fails, it serves the store a little longer after leaving its
notice, until every other rank has read the notices or left its own (:func:`hold_store_for_readers`,
at most :data:`HOLD_S`), so that its notice does not go down with it. Every store operation here is
bounded by a short timeout: a failing process never waits long.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import time
from dataclasses import dataclass

import torch.distributed as dist

#: Upper bound on one store operation while failing [s].
NOTICE_TIMEOUT_S = 5.0

#: The longest a failing rank that serves the store waits for the others to read its notice [s].
HOLD_S = 10.0

_KEY = "partgnn/failed/{rank}"
#: Set by a rank that knows why the job failed: it read the notices, or its group agreed on the
#: failure (:func:`mark_informed`).
_INFORMED_KEY = "partgnn/failed/informed/{rank}"
#: How many notices were left (read without waiting by :func:`notices_left`).
_COUNT_KEY = "partgnn/failed/count"

#: Phrases of the messages gloo, NCCL and the store raise when a peer is gone or silent.
_LOST_PEER_PHRASES = (
    "connection closed by peer",
    "connection reset by peer",
    "timed out",
    "timeout",
    "broken pipe",
    "connection refused",
    "nccl",
    "gloo",
)


@dataclass(frozen=True)
class FailureNotice:
    """One rank's reason for leaving: its global rank, exit status and one-line reason."""

    rank: int
    exit_code: int
    reason: str


def leave_notice(exit_code: int, reason: str) -> bool:
    """Writes this rank's failure notice into the default group's store.

    Waits for the store to hold it (a set followed by a get), so a peer that sees this rank's
    connections close afterwards finds the notice. Never raises.

    Args:
        exit_code: The status this process exits with.
        reason: One line saying why.

    Returns:
        True if the notice was stored.
    """
    store = _store()
    if store is None:
        return False
    key = _KEY.format(rank=dist.get_rank())
    try:
        store.set(key, f"{exit_code}\t{reason}")
        store.get(key)
        store.add(_COUNT_KEY, 1)
    except Exception:  # the store may be gone with rank 0; nothing to add then.
        return False
    return True


def notices_left() -> int:
    """How many notices ranks of the job left so far (0 also when the store cannot say).

    One store round trip; never raises.
    """
    # The store as it is: a shorter timeout set here would also bound the job's own waits in
    # it (NCCL's communicators made later exchange their ids through it), and an add never
    # waits for a key.
    store = _store(short_timeout=False)
    if store is None:
        return 0
    try:
        return int(store.add(_COUNT_KEY, 0))
    except Exception:  # a store that cannot answer has no notice for us.
        return 0


def read_notices() -> list[FailureNotice]:
    """The notices other ranks of the job left, lowest rank first (empty when none or no store).

    Never raises and never waits for a notice that is not there.
    """
    store = _store()
    if store is None:
        return []
    notices = []
    me = dist.get_rank()
    for rank in range(dist.get_world_size()):
        key = _KEY.format(rank=rank)
        try:
            if rank == me or not store.check([key]):
                continue
            code, _, reason = store.get(key).decode(errors="replace").partition("\t")
            notices.append(FailureNotice(rank, int(code), reason))
        except Exception:  # a store that cannot answer has no notice for us.
            break
    if notices:
        _set_informed(store)
    return notices


def mark_informed() -> None:
    """Says that this rank needs no notice (its group agreed on the failure it reports), so that
    a failing rank serving the store does not wait for it to read; never raises."""
    store = _store()
    if store is not None:
        _set_informed(store)


def _set_informed(store: dist.Store) -> None:
    """Sets this rank's :data:`_INFORMED_KEY`; never raises."""
    with contextlib.suppress(Exception):  # the rank serving the store may be gone
        store.set(_INFORMED_KEY.format(rank=dist.get_rank()), "1")


def serves_store() -> bool:
    """Whether this process serves the job's store: global rank 0 outside torchrun (whose
    agent serves it there)."""
    return (
        dist.is_available() and dist.is_initialized() and dist.get_rank() == 0
        and "TORCHELASTIC_RUN_ID" not in os.environ
    )  # fmt: skip


def notice_store() -> dist.Store | None:
    """The store notices live in (hold a reference to keep it served after the process group
    is destroyed), or None."""
    return _store()


def hold_store_for_readers(
    store: dist.Store, rank: int, world_size: int, timeout_s: float = HOLD_S
) -> None:
    """Waits until every rank of the job but ``rank`` has left its own notice or knows why the
    job failed (read the notices, or its group agreed on the failure: :func:`mark_informed`),
    or ``timeout_s``; never raises."""
    pending = set(range(world_size)) - {rank}
    deadline = time.monotonic() + timeout_s
    while pending and time.monotonic() < deadline:
        try:
            pending = {
                other for other in pending
                if not store.check([_KEY.format(rank=other)])
                and not store.check([_INFORMED_KEY.format(rank=other)])
            }  # fmt: skip
        except Exception:  # a store that cannot answer: nobody can read from it
            return
        if pending:
            time.sleep(0.05)


def is_lost_peer(err: BaseException) -> bool:
    """True for the errors a collective raises when a peer died, left or stopped answering."""
    if isinstance(err, dist.DistError):
        return True
    if not isinstance(err, RuntimeError):
        return False
    text = str(err).lower()
    return any(phrase in text for phrase in _LOST_PEER_PHRASES)


def _store(short_timeout: bool = True) -> dist.Store | None:
    """The default group's store (with a short timeout, for a failing rank that must not wait
    long), or None when there is none."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    try:
        store = dist.distributed_c10d._get_default_store()
        if short_timeout:
            store.set_timeout(datetime.timedelta(seconds=NOTICE_TIMEOUT_S))
    except Exception:  # a private torch API: if it moves, notices are off.
        return None
    return store
