"""How a failure is told: exit statuses, one-line descriptions, and which errors mean a lost peer
(the multi-process behaviour is tested in tests/reliability/test_peer_failure.py)."""

from __future__ import annotations

import datetime
import threading

import pytest
import torch.distributed as dist

from partgnn.distributed import failure_notices
from partgnn.distributed.context import DistContext
from partgnn.distributed.failure_notices import is_lost_peer, read_notices
from partgnn.distributed.session import explain_failure
from partgnn.errors import InputError, OutputError, PeerFailure, describe, exit_status
from tests.distributed.launch import launch


@pytest.mark.parametrize(
    "err, status, line",
    [
        (InputError("a.h5: bad"), 2, "a.h5: bad"),
        (OutputError("b.pt: could not be written (No space left on device)"), 1,
         "b.pt: could not be written (No space left on device)"),
        (PeerFailure("rank 1 failed: a.h5: bad", exit_code=2), 2, "rank 1 failed: a.h5: bad"),
        (ValueError("first\nsecond"), 1, "ValueError: first"),
        (KeyboardInterrupt(), 130, "interrupted"),
    ],
)  # fmt: skip
def test_exit_status_and_one_line(err, status, line):
    assert exit_status(err) == status
    assert describe(err) == line


@pytest.mark.parametrize(
    "err, lost",
    [
        (RuntimeError("[gloo/pair.cc:537] Read error: Connection reset by peer"), True),
        (RuntimeError("[pair.cc:534] Connection closed by peer [127.0.0.1]:1234"), True),
        (RuntimeError("Timed out waiting 20000ms for send operation to complete"), True),
        (RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x5 and 4x16)"), False),
        (InputError("a.h5: event 3 is unreadable"), False),
        (ValueError("connection reset by peer"), False),
    ],
)  # fmt: skip
def test_lost_peer_errors_are_told_from_a_rank_s_own(err, lost):
    assert is_lost_peer(err) is lost


def test_a_single_process_keeps_its_own_error_and_has_no_notices():
    context = DistContext.one_process("cpu")
    err = RuntimeError("Connection reset by peer")
    assert explain_failure(err, context) is err
    assert read_notices() == []


def test_a_rank_blocked_outside_python_reports_the_failed_peer_and_exits(tmp_path):
    """What NCCL needs (a collective there never raises when a peer is gone): the failure watch
    ends the blocked rank with the failed rank's one-line reason and exit status."""
    results = launch(
        2, "tests.distributed.failure_watch_worker", [], workdir=tmp_path, timeout=120, grace=60
    )
    blocked, failed = results
    assert failed.returncode == 2
    assert blocked.returncode == 2, blocked.stderr[-2000:]
    assert blocked.stderr.strip().splitlines()[-1] == (
        "partgnn: error: rank 1 failed: events.h5: event 7 is unreadable"
    )


def test_watching_for_notices_leaves_the_stores_timeout_alone():
    """The failure watch asks every 2 s for the whole run: it must not shorten the timeout of
    the job's own waits in the store (NCCL exchanges its communicators' ids there)."""
    import datetime

    import torch.distributed as dist

    from partgnn.distributed.failure_notices import notices_left
    from partgnn.distributed.process_group import destroy_distributed, init_distributed

    context = init_distributed(device="cpu", timeout_s=60)
    try:
        store = dist.distributed_c10d._get_default_store()
        store.set_timeout(datetime.timedelta(seconds=123))
        assert notices_left() == 0
        assert store.timeout == datetime.timedelta(seconds=123)
    finally:
        destroy_distributed(context)


def test_the_rank_serving_the_store_waits_only_for_ranks_that_do_not_know_why(monkeypatch):
    """Rank 0 of four left its notice: it holds the store while a rank neither left its own
    notice nor knows why the job failed (read the notices, or its group agreed), and no longer."""
    server = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=30))
    server.set("partgnn/failed/0", "2\tbad input")
    server.set("partgnn/failed/1", "2\tbad input")  # rank 1 failed on its own
    server.set("partgnn/failed/informed/2", "1")  # rank 2 read the notices
    holding = threading.Thread(
        target=failure_notices.hold_store_for_readers, args=(server, 0, 4), kwargs={"timeout_s": 60}
    )
    holding.start()
    holding.join(0.5)
    assert holding.is_alive()  # rank 3 has not said it knows
    rank3 = dist.TCPStore("127.0.0.1", server.port, 1, False)
    monkeypatch.setattr(failure_notices, "_store", lambda short_timeout=True: rank3)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 3)
    failure_notices.mark_informed()  # rank 3's group agreed on the failure
    holding.join(30)
    assert not holding.is_alive()
