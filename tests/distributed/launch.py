"""Runs a Python module as P real processes on gloo over loopback, the way torchrun would.

Each rank gets RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT (a free port), one
thread, and its own stdout/stderr files. The ranks are forked by the worker's fork server, with
torch, PyG and partgnn imported (:mod:`tests.forkserver`; ``PARTGNN_TESTS_FORK=0``: fresh
interpreters). The launcher never hangs: past the deadline every rank is killed; when a rank
fails the others get a short grace period, then are killed too. Failures are reported with the
tail of every rank's stderr.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.forkserver import fork_server, forkable
from tests.subprocesses import DEADLINE_S, deadline_within_test

REPOSITORY = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class RankResult:
    rank: int
    returncode: int | None
    stdout: str
    stderr: str


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a test child process: one thread, the repository importable."""
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(REPOSITORY))
    env.update(extra)
    return env


def launch(
    world_size: int,
    module: str,
    args: list[str],
    *,
    workdir: Path,
    timeout: float = DEADLINE_S,
    grace: float = 20.0,
) -> list[RankResult]:
    """Starts ``python -m module *args`` as ``world_size`` ranks and waits for all of them.

    Args:
        world_size: Number of ranks.
        module: Module to run (e.g. ``tests.distributed.exactness_worker``).
        args: Its arguments.
        workdir: Folder for each rank's stdout/stderr files.
        timeout: Deadline for the whole run [s].
        grace: How long the other ranks may go on after one rank failed [s].

    Returns:
        One result per rank (returncode ``None`` means it was killed).
    """
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    processes, logs = [], []
    for rank in range(world_size):
        out = open(workdir / f"rank{rank}.out", "w")  # noqa: SIM115
        err = open(workdir / f"rank{rank}.err", "w")  # noqa: SIM115
        logs.append((out, err))
        env = child_env(
            RANK=str(rank),
            WORLD_SIZE=str(world_size),
            LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE=str(world_size),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        server = fork_server() if forkable(env) else None
        if server is not None:  # a process forked with torch, PyG and partgnn imported
            processes.append(
                server.start(
                    module,
                    args,
                    env=env,
                    cwd=REPOSITORY,
                    stdout=workdir / f"rank{rank}.out",
                    stderr=workdir / f"rank{rank}.err",
                )
            )
            continue
        processes.append(
            subprocess.Popen(
                [sys.executable, "-m", module, *args],
                cwd=REPOSITORY,
                env=env,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
            )
        )
    deadline = time.monotonic() + deadline_within_test(timeout)
    failed_at = None
    while any(p.poll() is None for p in processes):
        now = time.monotonic()
        if failed_at is None and any(p.poll() not in (None, 0) for p in processes):
            failed_at = now
        if now > deadline or (failed_at is not None and now > failed_at + grace):
            for p in processes:
                if p.poll() is None:
                    p.kill()
            break
        time.sleep(0.05)
    results = []
    for rank, (process, (out, err)) in enumerate(zip(processes, logs, strict=True)):
        process.wait()
        out.close()
        err.close()
        code = process.returncode
        killed = code < 0  # ended by a signal: the deadline or grace period ran out
        results.append(
            RankResult(
                rank=rank,
                returncode=None if killed else code,
                stdout=(workdir / f"rank{rank}.out").read_text(),
                stderr=(workdir / f"rank{rank}.err").read_text(),
            )
        )
    return results


def assert_all_succeeded(results: list[RankResult]) -> None:
    """Fails with every rank's exit status and stderr tail unless all ranks exited 0."""
    if all(r.returncode == 0 for r in results):
        return
    report = []
    for r in results:
        status = "killed (timeout)" if r.returncode is None else f"exit {r.returncode}"
        tail = "\n".join(r.stderr.strip().splitlines()[-25:])
        report.append(f"--- rank {r.rank}: {status}\n{tail}")
    raise AssertionError("distributed run failed:\n" + "\n".join(report))
