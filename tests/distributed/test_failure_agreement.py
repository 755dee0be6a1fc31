"""A rank-local exception in PartitionedLayer is an error on every rank at once, not a hang.

Three real processes (gloo over loopback, a 300 s process-group timeout) run
tests/distributed/failure_worker.py: FeaStConv failing on the rank that owns no node, one rank
passing a wrong number of rows, then a normal forward (the group still works), then a layer
raising on rank 0 that nobody catches. The failing rank raises its own exception, the others
PeerFailure naming it; at the end every rank exits non-zero. No failure waits for the timeout:
the launcher's deadline (120 s) sits below it, so a rank that waited would be killed and fail
the test (no scenario is timed: a loaded machine must not break the test).
"""

from __future__ import annotations

import json

import pytest

from tests.distributed.launch import launch

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("control_group", [False, True])
def test_rank_local_exceptions_fail_every_rank_within_seconds(tmp_path, control_group):
    out = tmp_path / "record"
    results = launch(
        3,
        "tests.distributed.failure_worker",
        ["--out", str(out), *(["--control-group"] if control_group else [])],
        workdir=tmp_path / "logs",
        timeout=120.0,
        grace=60.0,
    )
    records = []
    for rank in range(3):
        path = out.with_name(f"record.rank{rank}")
        assert path.exists(), f"rank {rank} wrote no record:\n{results[rank].stderr[-2000:]}"
        records.append(json.loads(path.read_text()))

    for rank, record in enumerate(records):
        empty = record["empty-rank"]
        if rank == 2:
            assert empty["error"] == "RuntimeError", empty
        else:
            assert empty["error"] == "PeerFailure", empty
            assert "rank 2: RuntimeError" in empty["message"], empty
        bad = record["bad-rows"]
        if rank == 1:
            assert bad["error"] == "ValueError" and "rows, the rank owns" in bad["message"], bad
        else:
            assert bad["error"] == "PeerFailure" and "rank 1: ValueError" in bad["message"], bad
        assert record["recovered"]["error"] is None, record["recovered"]

    for result in results:
        assert result.returncode not in (0, None), f"rank {result.rank}: {result.returncode}"
    assert "RuntimeError: boom on rank 0" in results[0].stderr
    for result in results[1:]:
        assert "PeerFailure" in result.stderr and "rank 0: RuntimeError: boom" in result.stderr
