"""A training job killed or preempted under real torchrun continues by itself, bit-exactly.

Three halo runs on 2 ranks of the same config: uninterrupted (the reference); one whose rank 1
is killed with SIGKILL after step 20 under ``torchrun --max-restarts 1 ... --resume auto`` (the
agent restarts both ranks, which continue from the last checkpoint); one whose torchrun gets
SIGTERM after step 20 (the ranks finish their step, checkpoint and exit with 128 + 15), then is
launched again with ``--resume auto``. Both end with weights bit-identical to the reference and
a metrics.csv without a repeated step.
"""

from __future__ import annotations

import csv
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.distributed.launch import REPOSITORY, child_env, free_port
from tests.train.conftest import write_config

STEPS = 300
CHECKPOINT_EVERY = 10


def _config(pipeline: dict[str, Path], run: Path) -> Path:
    return write_config(
        run.parent / f"{run.name}.yaml",
        mode="halo",
        data={"shards": str(pipeline["shards"])},
        optim={"epochs": 1000, "max_steps": STEPS},
        run={"dir": str(run), "checkpoint_every": CHECKPOINT_EVERY, "eval_every": 20,
             "timeout_s": 60},
    )  # fmt: skip


def _torchrun(config: Path, log: Path, *extra: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "--master-port", str(free_port()), *extra, "-m", "partgnn", "train", "--config",
               str(config), "--resume", "auto"]  # fmt: skip
    with open(log, "w") as stderr:  # the child keeps its own descriptor
        return subprocess.Popen(
            command,
            cwd=REPOSITORY,
            env=child_env(),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
        )


def _wait_for(path: Path, process: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, "the run ended before the checkpoint appeared"
        if time.monotonic() > deadline:
            pytest.fail(f"{path} did not appear within {timeout:g} s")
        time.sleep(0.05)


def _finish(process: subprocess.Popen, timeout: float = 240) -> int:
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        raise


def _worker_of_rank(agent: subprocess.Popen, rank: int) -> int:
    children = Path(f"/proc/{agent.pid}/task/{agent.pid}/children").read_text().split()
    for pid in children:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        if f"RANK={rank}".encode() in environ:
            return int(pid)
    raise AssertionError(f"no worker of rank {rank} among {children}")


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "checkpoints" / "last.pt", weights_only=True)["model"]


def _metrics(run: Path) -> list[tuple[str, ...]]:
    """metrics.csv without its timing, memory and byte-count columns (they differ from run to
    run, and the bytes exchanged count from the start or resume)."""
    with open(run / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    kept = [k for k in rows[0] if not k.endswith(("_s", "_mb_max", "_per_rank", "_exchanged"))]
    return [tuple(row[k] for k in kept) for row in rows]


@pytest.fixture(scope="module")
def reference(pipeline, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("preemption") / "reference"
    process = _torchrun(_config(pipeline, run), run.parent / "reference.err")
    assert _finish(process) == 0, (run.parent / "reference.err").read_text()[-3000:]
    return run


def _assert_same_as(run: Path, reference: Path) -> None:
    mine, theirs = _weights(run), _weights(reference)
    assert mine.keys() == theirs.keys()
    assert [k for k in mine if not torch.equal(mine[k], theirs[k])] == []
    rows = _metrics(run)
    steps = [row[1] for row in rows]
    assert len(steps) == len(set(steps)), f"a step is logged twice: {steps}"
    assert rows == _metrics(reference)
    assert not (run / ".lock").exists()
    assert not list((run / "checkpoints").glob(".*.tmp"))


@pytest.mark.slow
def test_a_killed_rank_is_restarted_by_torchrun_and_continues_exactly(pipeline, reference):
    run = reference.parent / "killed"
    log = run.parent / "killed.err"
    agent = _torchrun(_config(pipeline, run), log, "--max-restarts", "1")
    _wait_for(run / "checkpoints" / "step-0000020.pt", agent)
    subprocess.run(["kill", "-9", str(_worker_of_rank(agent, 1))], check=True)
    assert _finish(agent) == 0, log.read_text()[-3000:]
    assert "lost contact with the other ranks" in log.read_text()  # rank 0, before the restart
    _assert_same_as(run, reference)


@pytest.mark.slow
def test_sigterm_checkpoints_and_resume_auto_continues_exactly(pipeline, reference):
    run = reference.parent / "preempted"
    log = run.parent / "preempted.err"
    config = _config(pipeline, run)
    agent = _torchrun(config, log)
    _wait_for(run / "checkpoints" / "step-0000020.pt", agent)
    agent.send_signal(signal.SIGTERM)
    _finish(agent)
    stopped = [line for line in log.read_text().splitlines() if "partgnn: stopped by" in line]
    assert len(stopped) == 1, log.read_text()[-3000:]
    step = int(stopped[0].split("after step ")[1].split()[0])
    assert 20 <= step < STEPS
    assert (run / "checkpoints" / f"step-{step:07d}.pt").exists()  # the stop's own checkpoint
    assert not (run / "summary.json").exists()
    again = _torchrun(config, run.parent / "resumed.err")
    assert _finish(again) == 0, (run.parent / "resumed.err").read_text()[-3000:]
    _assert_same_as(run, reference)
