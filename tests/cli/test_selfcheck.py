"""A tiny exactness check under both real launchers: torchrun and mpirun (mpich wheel)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.distributed.launch import REPOSITORY, child_env, free_port
from tests.subprocesses import run_command

BIN = Path(sys.executable).parent


def _run(command: list[str]) -> subprocess.CompletedProcess:
    return run_command(command, cwd=REPOSITORY, env=child_env())


def _assert_ok(done: subprocess.CompletedProcess, ranks: int, launcher: str) -> None:
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"
    line = [x for x in done.stdout.splitlines() if x.startswith("selfcheck:")]
    assert len(line) == 1, done.stdout
    assert f"{ranks} ranks ({launcher}, gloo, cpu)" in line[0] and line[0].endswith("OK")


@pytest.mark.slow
def test_selfcheck_under_torchrun():
    command = [
        str(BIN / "torchrun"),
        "--nproc-per-node",
        "2",
        "--master-port",
        str(free_port()),
        "-m",
        "partgnn",
        "selfcheck",
        "--device",
        "cpu",
        "--timeout",
        "60",
    ]
    _assert_ok(_run(command), 2, "torchrun")


@pytest.mark.slow
def test_selfcheck_under_mpirun():
    command = [
        str(BIN / "mpirun"),
        "-n",
        "2",
        str(BIN / "partgnn"),
        "selfcheck",
        "--device",
        "cpu",
        "--transport",
        "p2p",
        "--timeout",
        "60",
    ]
    _assert_ok(_run(command), 2, "mpi")


def test_selfcheck_in_one_process():
    done = _run([str(BIN / "partgnn"), "selfcheck", "--device", "cpu", "--timeout", "30"])
    _assert_ok(done, 1, "single")
