"""The fork server's commands (tests/forkserver.py) behave as the commands they stand for: a
tool run with :func:`forked_python` gets its partgnn commands' output, exit status and signals
as a fresh process would give them, and a killed command takes its forked child with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.distributed.launch import REPOSITORY, child_env, free_port
from tests.forkserver import fork_server, forked_bin, forked_python
from tests.subprocesses import run_command

pytestmark = pytest.mark.skipif(
    os.environ.get("PARTGNN_TESTS_FORK", "1") == "0", reason="the fork server is switched off"
)


def test_a_forked_command_gives_what_the_installed_one_gives(tmp_path):
    installed = Path(sys.executable).parent
    for bin_dir in (installed, forked_bin()):
        done = run_command([str(bin_dir / "partgnn"), "--version"], env=child_env(), cwd=tmp_path)
        assert done.returncode == 0 and done.stdout.startswith("partgnn "), done.stderr
        wrong = run_command([str(bin_dir / "partgnn"), "no-such-command"], env=child_env())
        assert wrong.returncode == 2 and "invalid choice" in wrong.stderr
    forked = run_command([str(forked_bin() / "partgnn"), "--version"], env=child_env())
    fresh = run_command([str(installed / "partgnn"), "--version"], env=child_env())
    assert forked.stdout == fresh.stdout


def test_a_tool_sees_the_commands_folder_and_python_c_is_the_installed_interpreter(tmp_path):
    """A tool's ``sys.executable`` is the folder's ``python`` (its commands are forked too); what
    the server does not fork (``python -c``) runs the installed interpreter, in this directory
    and environment."""
    code = "import os, sys; print(sys.executable, os.getcwd(), os.environ['MARK'])"
    done = run_command([forked_python(), "-c", code], env=child_env(MARK="m1"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [sys.executable, str(tmp_path), "m1"]


def _blocked_selfcheck() -> subprocess.Popen:
    """A forked ``partgnn selfcheck`` as rank 0 of 2 whose rank 1 never comes: it waits."""
    env = child_env(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                    MASTER_PORT=str(free_port()))  # fmt: skip
    command = [str(forked_bin() / "partgnn"), "selfcheck", "--timeout", "60"]
    return subprocess.Popen(command, env=env, cwd=REPOSITORY, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip


def _server_children() -> set[int]:
    server = fork_server()
    assert server is not None
    children = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if parent == server.pid:
                children.add(int(entry.name))
    return children


def _forked_child(before: set[int]) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        new = _server_children() - before
        if new:
            (child,) = new
            return child
        time.sleep(0.05)
    raise AssertionError("the forked child did not start")


def _gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists() or "Z" in _state(pid):
            return True
        time.sleep(0.05)
    return False


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_a_signal_to_a_command_is_its_forked_childs(tmp_path):
    """SIGTERM reaches the child: partgnn's own handling (exit 143, one line, nothing left)."""
    out = tmp_path / "events.h5"
    command = subprocess.Popen(
        [str(forked_bin() / "partgnn"), "simulate", "--events", "400", "--pileup", "10", "--out",
         str(out)], env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob(".events.h5.*")):
            assert command.poll() is None, command.stderr.read()[-2000:]
            if time.monotonic() > deadline:
                pytest.fail("nothing was staged")
            time.sleep(0.01)
        time.sleep(0.5)
        command.send_signal(signal.SIGTERM)
        _, stderr = command.communicate(timeout=60)
        assert command.returncode == 143, stderr[-2000:]
        assert stderr.strip().splitlines()[-1] == "partgnn: error: stopped by SIGTERM"
        assert not out.exists() and not list(tmp_path.iterdir())
    finally:
        command.kill()
        command.communicate()


def test_a_killed_command_takes_its_forked_child_with_it():
    """SIGKILL, which no process can pass on, ends the child through the server."""
    before = _server_children()
    command = _blocked_selfcheck()
    try:
        child = _forked_child(before)
        assert command.poll() is None
        command.kill()
        command.wait(timeout=30)
        assert _gone(child, within=10), f"the forked child {child} outlived its command"
    finally:
        command.kill()
        command.communicate()
