"""A rank that fails on its own input: every rank says why in one line, and nobody waits.

Real processes on gloo: one bit of one rank's part file is flipped in an event's halo plan
(``plan/send_index``; the group's shard check passes; the rank fails on the dataset's checksum
while training reads the event). The failing
rank reports its reason; the other leaves its broken collective with "rank R failed: <reason>"
read from the failing rank's notice in the rendezvous store, both with exit status 2.
"""

from __future__ import annotations

import shutil

import pytest

from partgnn.partition.shard_reader import shard_path
from tests.distributed.launch import launch
from tests.reliability.test_integrity import flip_bit
from tests.train.conftest import write_config


@pytest.mark.slow
@pytest.mark.parametrize("failing", [0, 1])
def test_a_rank_failing_on_its_input_is_reported_by_every_rank(pipeline, tmp_path, failing):
    shards = tmp_path / "shards"
    shutil.copytree(pipeline["shards"], shards)
    part = shard_path(shards, failing)
    flip_bit(part, "/events/event000000001/plan/send_index", tmp_path / "part.h5")
    shutil.move(tmp_path / "part.h5", part)
    config = write_config(
        tmp_path / "halo.yaml",
        mode="halo",
        data={"shards": str(shards)},
        optim={"epochs": 2},
        run={"dir": str(tmp_path / "run"), "timeout_s": 120},
    )
    # The launcher's deadline (60 s) sits below the collective timeout (120 s): a rank that
    # waited for the timeout would be killed and have no exit status.
    results = launch(
        2, "partgnn", ["train", "--config", str(config)], workdir=tmp_path / "logs", timeout=60
    )
    reason = f"{part}: dataset /events/event000000001/plan/send_index fails its checksum"
    for result in results:
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2, result.stderr[-3000:]
        assert len(lines) == 1, result.stderr
        expected = "partgnn: error: " + (
            "" if result.rank == failing else f"rank {failing} failed: "
        )
        assert lines[0].startswith(expected + reason), lines[0]


@pytest.mark.slow
def test_a_damaged_validation_event_fails_every_rank_before_the_first_step(pipeline, tmp_path):
    """The validation events are read when training starts; a damaged one (rank 0's part, the
    rank that serves the store) is said by both ranks at once, before any step."""
    shards = tmp_path / "shards"
    shutil.copytree(pipeline["shards"], shards)
    part = shard_path(shards, 0)
    flip_bit(part, "/events/event000000003/plan/send_index", tmp_path / "part.h5")
    shutil.move(tmp_path / "part.h5", part)
    config = write_config(tmp_path / "halo.yaml", mode="halo", data={"shards": str(shards)},
                          run={"dir": str(tmp_path / "run"), "timeout_s": 120,
                               "checkpoint_every": 1})  # fmt: skip
    results = launch(
        2, "partgnn", ["train", "--config", str(config)], workdir=tmp_path / "logs", timeout=60
    )
    reason = f"{part}: dataset /events/event000000003/plan/send_index fails its checksum"
    for result in results:
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1, result.stderr[-3000:]
        expected = "partgnn: error: " + (
            ""
            if result.rank == 0
            else ("reading the validation events failed on another rank of the group (rank 0: ")
        )
        assert lines[0].startswith(expected + reason), lines[0]
    assert not list((tmp_path / "run").rglob("*.pt"))  # no step trained
