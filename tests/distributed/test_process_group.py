"""Process-group set-up: checks before any rendezvous, and real groups under torchrun, mpirun,
Slurm (launcher detection: test_launch_env.py).

The multi-process tests start real processes (gloo over 127.0.0.1) through
``_process_group_worker.py``; every process runs under a deadline and is killed with its whole
process group when it passes, and each rank's stderr is shown when a check fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from partgnn.distributed import process_group as pg
from partgnn.distributed.process_group import (
    DistributedError,
    destroy_distributed,
    init_distributed,
)
from partgnn.errors import InputError

WORKER = Path(__file__).with_name("_process_group_worker.py")
REPO_ROOT = Path(__file__).resolve().parents[2]
MPIRUN = Path(sys.executable).parent / "mpirun"

# Variables of any launcher: removed from the children's environment so that the tests mean the
# same inside a Slurm job or a torchrun as on a laptop.
_LAUNCHER_PREFIXES = ("SLURM_", "PMI_", "PMIX_", "OMPI_", "MV2_", "TORCHELASTIC_", "HYDRA_")
_LAUNCHER_NAMES = {
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
    "PARTGNN_DIST_TIMEOUT",
}


# --- helpers -------------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port that was free a moment ago (the OS picks it when binding port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def child_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in _LAUNCHER_NAMES and not k.startswith(_LAUNCHER_PREFIXES)
    }
    env["OMP_NUM_THREADS"] = "1"  # Two cores: several ranks must not fight over threads.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


@dataclass
class Finished:
    """One child process after the run: exit status (None: killed at the deadline), output."""

    args: list[str]
    returncode: int | None
    elapsed: float
    stdout: str
    stderr: str


def run_processes(
    commands: list[tuple[list[str], dict[str, str]]],
    tmp_path: Path,
    *,
    deadline_s: float,
    wait_for: list[int] | None = None,
) -> list[Finished]:
    """Start every command at once and wait until those in ``wait_for`` (default all) exit.

    Each child leads its own process group, so killing it also kills what it started (torchrun's
    or mpirun's ranks). Children still running at the deadline, or once the awaited ones are
    done, are killed and get ``returncode=None``. Output goes to files, not pipes, so a chatty
    child can never block on a full pipe.
    """
    wait_for = list(range(len(commands))) if wait_for is None else wait_for
    with contextlib.ExitStack() as stack:
        logs, procs = [], []
        start = time.monotonic()
        for i, (args, env) in enumerate(commands):
            out = stack.enter_context(open(tmp_path / f"p{i}.out", "w+"))
            err = stack.enter_context(open(tmp_path / f"p{i}.err", "w+"))
            logs.append((out, err))
            procs.append(
                subprocess.Popen(args, env=env, stdout=out, stderr=err, start_new_session=True)
            )
        ended: dict[int, float] = {}
        while time.monotonic() - start < deadline_s:
            for i, proc in enumerate(procs):
                if i not in ended and proc.poll() is not None:
                    ended[i] = time.monotonic() - start
            if all(i in ended for i in wait_for):
                break
            time.sleep(0.05)
        results = []
        for i, proc in enumerate(procs):
            # Kill the child's whole group: a live child, or what an exited leader left behind.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            out, err = logs[i]
            out.seek(0)
            err.seek(0)
            results.append(
                Finished(
                    commands[i][0],
                    proc.returncode if i in ended else None,
                    ended.get(i, time.monotonic() - start),
                    out.read(),
                    err.read(),
                )
            )
    return results


def report(results: list[Finished]) -> str:
    """Every child's command, status and output tail, for assertion messages."""
    parts = []
    for i, r in enumerate(results):
        status = "killed at deadline" if r.returncode is None else f"exit {r.returncode}"
        parts.append(
            f"--- process {i}: {' '.join(r.args[-4:])} ({status}, {r.elapsed:.1f} s)\n"
            f"stdout:\n{r.stdout[-2000:]}\nstderr:\n{r.stderr[-4000:]}"
        )
    return "\n".join(parts)


def assert_all_ok(results: list[Finished]) -> None:
    assert all(r.returncode == 0 for r in results), report(results)


def read_ranks(out_dir: Path, n: int, results: list[Finished]) -> list[dict]:
    records = []
    for rank in range(n):
        path = out_dir / f"rank{rank}.json"
        assert path.exists(), f"rank {rank} wrote no result\n{report(results)}"
        records.append(json.loads(path.read_text()))
    return records


def worker(mode: str, out_dir: Path, *args: object) -> list[str]:
    return [sys.executable, str(WORKER), mode, str(out_dir), *map(str, args)]


def env_rank(rank: int, world: int, port: int, **extra: str) -> dict[str, str]:
    """Environment of rank ``rank`` started by hand (the ``env`` launcher)."""
    return child_env(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        **extra,
    )


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    path = tmp_path / "out"
    path.mkdir()
    return path


# --- init_distributed: checks before any rendezvous ----------------------------------------


def test_group_size_must_divide_world():
    env = {"RANK": "0", "WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    with pytest.raises(InputError, match="group_size 2 does not divide the world size 3"):
        init_distributed(group_size=2, environ=env)
    with pytest.raises(InputError, match="positive integer"):
        init_distributed(group_size=0, environ={})
    assert not dist.is_initialized()


def test_graph_parallel_size_is_read_as_group_size():
    """The former name still works, with a DeprecationWarning; both given is refused."""
    env = {"RANK": "0", "WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    with (
        pytest.warns(DeprecationWarning, match="now group_size"),
        pytest.raises(InputError, match="group_size 2 does not divide the world size 3"),
    ):
        init_distributed(graph_parallel_size=2, environ=env)
    with pytest.raises(InputError, match="former name: give one"):
        init_distributed(group_size=2, graph_parallel_size=2, environ=env)
    assert not dist.is_initialized()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"device": "tpu"}, "device must be"),
        ({"device": "cpu", "backend": "nccl"}, "needs a CUDA device"),
        ({"timeout_s": 0}, "is not a timeout: give a number of seconds >= 1"),
        ({"environ": {"PARTGNN_DIST_TIMEOUT": "soon"}}, "PARTGNN_DIST_TIMEOUT='soon'"),
    ],
)
def test_bad_options(kwargs, message):
    with pytest.raises(InputError, match=message):
        init_distributed(**{"environ": {}, **kwargs})
    assert not dist.is_initialized()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_cuda_requested_without_cuda():
    with pytest.raises(InputError, match="CUDA is not available"):
        init_distributed(device="cuda", environ={})


def test_timeout_precedence_is_option_then_environment_then_config():
    env = {"PARTGNN_DIST_TIMEOUT": "7.5"}
    assert pg.resolve_timeout(3, env, 40) == 3.0
    assert pg.resolve_timeout(None, env, 40) == 7.5
    assert pg.resolve_timeout(None, {}, 40) == 40.0
    assert pg.resolve_timeout(None, {}) == pg.DEFAULT_TIMEOUT_S


@pytest.mark.parametrize("value", ["0.001", "0", "-1", "abc", "nan", "inf"])
def test_bad_timeout_in_the_environment_is_refused(value):
    expected = re.escape(f"PARTGNN_DIST_TIMEOUT='{value}' is not a timeout")
    with pytest.raises(InputError, match=expected):
        pg.resolve_timeout(None, {"PARTGNN_DIST_TIMEOUT": value}, 300)


def test_bad_timeout_option_and_config_are_named():
    with pytest.raises(InputError, match=re.escape("--timeout 0.5 is not a timeout")):
        pg.resolve_timeout(0.5, {}, 300)
    with pytest.raises(InputError, match=re.escape("run.timeout_s 0.2 is not a timeout")):
        pg.resolve_timeout(None, {}, 0.2)


# --- real process groups ---------------------------------------------------------------------


def test_single_process_is_a_real_group_of_one():
    ctx = init_distributed(device="cpu", environ={})
    try:
        assert (ctx.launcher, ctx.group_rank, ctx.group_size, ctx.global_world_size) == (
            "single",
            0,
            1,
            1,
        )
        assert ctx.group is None and ctx.data_parallel_group is None
        assert (ctx.device, ctx.backend) == (torch.device("cpu"), "gloo")
        value = torch.tensor([2.0])
        dist.all_reduce(value, group=ctx.group)
        assert value.item() == 2.0
        with pytest.raises(DistributedError, match="already initialised"):
            init_distributed(device="cpu", environ={})
    finally:
        destroy_distributed(ctx)
    assert not dist.is_initialized()
    destroy_distributed(ctx)  # A second call is harmless.


def _check_allreduce(records: list[dict], launcher: str) -> None:
    for rank, rec in enumerate(records):
        assert rec["launcher"] == launcher
        assert (rec["rank"], rec["world_size"], rec["global_rank"]) == (rank, 2, rank)
        assert (rec["local_rank"], rec["device"], rec["backend"]) == (rank, "cpu", "gloo")
        assert rec["sum"] == 3.0


@pytest.mark.slow
def test_torchrun_two_ranks(tmp_path, out_dir):
    args = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    args += ["--master-addr", "127.0.0.1", "--master-port", str(free_port())]
    args += worker("allreduce", out_dir)[1:]
    results = run_processes([(args, child_env())], tmp_path, deadline_s=90)
    assert_all_ok(results)
    _check_allreduce(read_ranks(out_dir, 2, results), "torchrun")


@pytest.mark.slow
@pytest.mark.skipif(not MPIRUN.exists(), reason="no mpirun next to this Python")
@pytest.mark.parametrize("local_rank_from", ["hydra", "mpi-split"])
def test_mpirun_two_ranks(tmp_path, out_dir, local_rank_from):
    pytest.importorskip("mpi4py")
    command = worker("allreduce", out_dir)
    if local_rank_from == "mpi-split":
        # Without Hydra's MPI_LOCALRANKID the local rank comes from MPI's shared-memory split.
        command = ["env", "-u", "MPI_LOCALRANKID", *command]
    args = [str(MPIRUN), "-n", "2", *command]
    results = run_processes([(args, child_env())], tmp_path, deadline_s=90)
    assert_all_ok(results)
    _check_allreduce(read_ranks(out_dir, 2, results), "mpi")


def test_fake_srun_two_ranks(tmp_path, out_dir):
    port = free_port()
    commands = []
    for rank in range(2):
        env = child_env(
            SLURM_JOB_ID="4711",
            SLURM_STEP_ID="0",
            SLURM_PROCID=str(rank),
            SLURM_NTASKS="2",
            SLURM_LOCALID=str(rank),
            SLURM_STEP_NODELIST="localhost",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        commands.append((worker("allreduce", out_dir), env))
    results = run_processes(commands, tmp_path, deadline_s=90)
    assert_all_ok(results)
    _check_allreduce(read_ranks(out_dir, 2, results), "slurm")


def test_graph_parallel_groups_of_two_among_four(tmp_path, out_dir):
    port = free_port()
    commands = [(worker("groups", out_dir, 2), env_rank(r, 4, port)) for r in range(4)]
    results = run_processes(commands, tmp_path, deadline_s=120)
    assert_all_ok(results)
    for g_rank, rec in enumerate(read_ranks(out_dir, 4, results)):
        assert rec["launcher"] == "env"
        assert (rec["global_rank"], rec["global_world_size"]) == (g_rank, 4)
        assert (rec["rank"], rec["world_size"], rec["n_graph_groups"]) == (g_rank % 2, 2, 2)
        assert (rec["rank_in_graph_group"], rec["graph_group_size"]) == (g_rank % 2, 2)
        # Graph groups {0, 1} and {2, 3}; data-parallel groups {0, 2} and {1, 3}.
        assert rec["graph_sum"] == {0: 1, 1: 1, 2: 5, 3: 5}[g_rank]
        assert rec["data_sum"] == {0: 2, 1: 4, 2: 2, 3: 4}[g_rank]


def test_missing_peer_fails_init_within_timeout(tmp_path, out_dir):
    port = free_port()
    results = run_processes(
        [(worker("missing_peer", out_dir, 3), env_rank(0, 2, port))], tmp_path, deadline_s=60
    )
    assert_all_ok(results)
    (rec,) = read_ranks(out_dir, 1, results)
    message = rec["error"]
    assert "\n" not in message
    assert f"launcher env, rank 0 of 2, rendezvous 127.0.0.1:{port}" in message, message
    # It waited for its 3 s timeout (a loaded machine only waits longer); a hang is killed at
    # the helper's 60 s deadline.
    assert rec["elapsed"] > 2.5, rec


@pytest.mark.parametrize("mode", ["silent_peer", "exiting_peer"])
def test_dead_peer_makes_the_collective_fail_not_hang(tmp_path, out_dir, mode):
    timeout_s = 4
    port = free_port()
    commands = [(worker(mode, out_dir, timeout_s), env_rank(r, 2, port)) for r in range(2)]
    results = run_processes(commands, tmp_path, deadline_s=60, wait_for=[0])
    rank0 = results[0]
    assert rank0.returncode not in (0, None), report(results)
    (rec,) = read_ranks(out_dir, 1, results)
    # A silent peer is caught by the timeout; a dead one as soon as its socket closes. Either
    # way rank 0 ended before the helper's 60 s deadline (else its returncode would be None).
    if mode == "silent_peer":
        assert rec["elapsed"] > timeout_s - 1, rec
        assert results[1].returncode is None  # Still asleep: killed by the helper.
