"""One writer per run directory: a live holder refuses others; a dead or silent one is replaced."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from partgnn.errors import InputError
from partgnn.train.run_directory import run_lock
from partgnn.train.run_directory.run_lock import LOCK_FILE, RunLock


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_live_holder_refuses_a_second_writer_with_one_line(tmp_path):
    with RunLock(tmp_path), pytest.raises(InputError) as refused:
        RunLock(tmp_path).acquire()
    message = str(refused.value)
    assert message.startswith(f"{tmp_path}: run directory in use by process {os.getpid()} on ")
    assert "\n" not in message
    assert not (tmp_path / LOCK_FILE).exists()  # released on exit


def test_the_lock_of_a_dead_process_on_this_host_is_taken_over(tmp_path):
    holder = {"host": socket.gethostname(), "pid": _dead_pid(), "started": time.time()}
    (tmp_path / LOCK_FILE).write_text(json.dumps(holder))
    with RunLock(tmp_path) as lock:
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
        assert lock.owner["pid"] == os.getpid()


def test_another_host_s_lock_is_stale_only_without_heartbeat(tmp_path):
    path = tmp_path / LOCK_FILE
    path.write_text(json.dumps({"host": "elsewhere", "pid": 1, "started": time.time()}))
    with pytest.raises(InputError, match="in use by process 1 on elsewhere"):
        RunLock(tmp_path).acquire()
    old = time.time() - run_lock.STALE_AFTER_S - 5
    os.utime(path, (old, old))
    with RunLock(tmp_path):
        assert json.loads(path.read_text())["host"] == socket.gethostname()


def test_a_torn_lock_file_holds_nothing(tmp_path):
    (tmp_path / LOCK_FILE).write_text('{"host": "x", "pi')
    with RunLock(tmp_path):
        pass


def test_the_heartbeat_touches_the_lock(tmp_path, monkeypatch):
    monkeypatch.setattr(run_lock, "HEARTBEAT_S", 0.05)
    with RunLock(tmp_path):
        path = tmp_path / LOCK_FILE
        old = time.time() - 100
        os.utime(path, (old, old))
        for _ in range(200):  # the heartbeat comes every 0.05 s; up to 10 s on a loaded machine
            if path.stat().st_mtime > old + 50:
                break
            time.sleep(0.05)
        assert path.stat().st_mtime > old + 50  # touched since it was set 100 s back
