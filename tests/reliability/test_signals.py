"""Signals everywhere: a command stopped by SIGTERM, SIGHUP or Ctrl-C cleans its staging output
and exits 128 + the signal with one line; staging left by a killed writer is removed by the next
run that writes there; worker processes stay quiet.

Real commands in real processes: each is signalled once its staging output exists (it is
writing), so the stop lands mid-write.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from partgnn.cli.main import main
from partgnn.data.files.output_files import remove_dead_writers_staging
from tests.distributed.launch import REPOSITORY, child_env, free_port
from tests.reliability.conftest import run_partgnn


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    """Events and graphs large enough that writing them takes a few seconds."""
    root = tmp_path_factory.mktemp("signals")
    events, graphs = root / "events.h5", root / "graphs.h5"
    for args in (
        ["simulate", "--events", "24", "--pileup", "10", "--seed", "5", "--out", events],
        ["build-graphs", events, "--pt-min", "0", "--out", graphs],
    ):
        assert main([str(arg) for arg in args]) == 0, args  # in this process: no process start
    return {"events": events, "graphs": graphs}


def _start(args: list[str], **popen) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "partgnn", *args],
        cwd=REPOSITORY,
        env=child_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def _staging(out: Path) -> list[Path]:
    return sorted(out.parent.glob(f".{out.name}.*"))


def _wait_for_staging(out: Path, process: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not _staging(out):
        assert process.poll() is None, process.stderr.read()[-2000:]
        if time.monotonic() > deadline:
            pytest.fail("no staging output appeared")
        time.sleep(0.01)


def _error_lines(stderr: str) -> list[str]:
    """Lines of stderr but progress bars."""
    lines = stderr.replace("\r", "\n").splitlines()
    return [line for line in lines if line.strip() and "|" not in line]


COMMANDS = {
    "build-graphs": lambda i, out: ["build-graphs", str(i["events"]), "--pt-min", "0",
                                    "--out", str(out)],
    "partition": lambda i, out: ["partition", str(i["graphs"]), "--parts", "4", "--workers",
                                 "2", "--out", str(out)],
    "build-graphs --workers": lambda i, out: ["build-graphs", str(i["events"]), "--pt-min", "0",
                                              "--workers", "2", "--out", str(out)],
}  # fmt: skip


@pytest.mark.parametrize(
    ("command", "signum"),
    [
        ("build-graphs", signal.SIGTERM),
        ("partition", signal.SIGHUP),
    ],
)
def test_a_stopped_command_cleans_up_and_exits_128_plus_the_signal(
    inputs, tmp_path, command, signum
):
    out = tmp_path / ("graphs.h5" if command == "build-graphs" else "shards")
    process = _start(COMMANDS[command](inputs, out))
    _wait_for_staging(out, process)
    time.sleep(0.5)  # mid-write
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signum, stderr[-2000:]  # SIGTERM: 143, SIGHUP: 129
    assert _error_lines(stderr) == [f"partgnn: error: stopped by {signum.name}"], stderr
    assert not out.exists()
    assert _staging(out) == []


@pytest.mark.parametrize("command", ["partition", "build-graphs --workers"])
def test_ctrl_c_stops_a_command_and_its_workers_quietly(inputs, tmp_path, command):
    out = tmp_path / ("shards" if command == "partition" else "graphs.h5")
    process = _start(COMMANDS[command](inputs, out), start_new_session=True)
    _wait_for_staging(out, process)
    time.sleep(1.5)  # the workers are partitioning
    os.killpg(process.pid, signal.SIGINT)  # what the terminal does: the whole group
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr[-2000:]
    assert _error_lines(stderr) == ["partgnn: error: interrupted"], stderr
    assert not out.exists()
    assert _staging(out) == []


def test_staging_of_a_killed_writer_is_removed_by_the_next_run(inputs, tmp_path):
    out = tmp_path / "graphs.h5"
    process = _start(COMMANDS["build-graphs"](inputs, out))
    _wait_for_staging(out, process)
    process.kill()  # SIGKILL: nothing can clean up
    process.communicate(timeout=60)
    assert _staging(out), "a killed writer leaves its staging file"
    done = run_partgnn(*COMMANDS["build-graphs"](inputs, out))
    assert done.returncode == 0, done.stderr[-2000:]
    assert _staging(out) == []
    assert out.is_file()


def test_only_dead_writers_staging_is_removed(tmp_path):
    host = os.uname().nodename.split(".")[0]
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    dead_pid = int(dead.stdout)
    target = tmp_path / "scores.h5"
    dead_file = tmp_path / f".scores.h5.{host}.{dead_pid}.abc.tmp"
    dead_folder = tmp_path / f".scores.h5.{host}.{dead_pid}.def"
    live = tmp_path / f".scores.h5.{host}.{os.getpid()}.ghi.tmp"
    other_host = tmp_path / f".scores.h5.otherhost.{dead_pid}.jkl.tmp"
    unrelated = tmp_path / f".scores.h5x.{host}.{dead_pid}.mno.tmp"
    for path in (dead_file, live, other_host, unrelated):
        path.write_bytes(b"partial")
    dead_folder.mkdir()
    (dead_folder / "part-00000.h5").write_bytes(b"partial")
    assert sorted(remove_dead_writers_staging(target)) == sorted([dead_file, dead_folder])
    assert live.exists() and other_host.exists() and unrelated.exists()


@pytest.mark.slow
def test_torchrun_reports_each_failed_ranks_line(inputs, tmp_path):
    shards = tmp_path / "shards"
    assert main(["partition", str(inputs["graphs"]), "--parts", "4", "--method", "phi",
                 "--out", str(shards)]) == 0  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--master-port", str(free_port()), "-m", "partgnn", "train", "--config", "halo",
         "--set", f"data.shards={shards}", "--set", f"run.dir={tmp_path / 'run'}"],
        capture_output=True, text=True, cwd=REPOSITORY, env=child_env(), timeout=120,
    )  # fmt: skip
    line = (
        f"partgnn: error: {shards}: shards are for 4 ranks but the world size is 2 "
        "(re-partition with --parts 2 or launch 4 processes)"
    )
    assert run.returncode == 1, run.stderr[-3000:]  # torchrun's own status
    assert line in run.stderr.splitlines()
    assert f"  traceback : {line}" in run.stderr.splitlines(), run.stderr[-3000:]
