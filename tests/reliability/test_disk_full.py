"""A disk that fills up: one line naming the file, exit 1, nothing half-written left behind.

The disk is a real 64 KiB tmpfs (the tests need root to mount it, and are skipped otherwise);
:class:`SpaceGuard`'s arithmetic is also tested on its own.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from partgnn.data.files import output_files
from partgnn.data.files.output_files import RESERVE_BYTES, SpaceGuard
from partgnn.errors import OutputError
from tests.reliability.conftest import run_partgnn, run_partgnn_in_process

_BAR = re.compile(r"\d+%\|")


def _tmpfs(mount: Path, options: str):
    """Mounts a tmpfs with ``options`` at ``mount`` for the body (skipped without root)."""
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)],
                          capture_output=True)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 64 KiB file system mounted under tmp_path (unmounted afterwards)."""
    yield from _tmpfs(tmp_path / "disk", "size=64k")


@pytest.fixture
def read_only_disk(tmp_path: Path):
    """A read-only file system mounted under tmp_path (unmounted afterwards)."""
    yield from _tmpfs(tmp_path / "read-only", "ro,size=64k")


def _error_line(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in done.stderr.strip().splitlines() if not _BAR.search(line)]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert len(lines) == 1, done.stderr[-3000:]
    return lines[0]


def test_partition_stops_before_the_disk_is_full(pipeline, small_disk):
    out = small_disk / "shards"
    done = run_partgnn("partition", str(pipeline["graphs"]), "--parts", "2", "--out", str(out))
    assert done.returncode == 1
    assert _error_line(done).startswith(f"partgnn: error: {out}: stopped before the disk is full")
    assert list(small_disk.iterdir()) == []  # no staging folder left


def test_a_checkpoint_that_does_not_fit_is_one_line_and_no_file(pipeline, small_disk):
    run = small_disk / "run"
    done = run_partgnn("train", "--config", str(pipeline["config"]), "--set", f"run.dir={run}")
    assert done.returncode == 1
    line = _error_line(done)
    assert re.match(
        rf"partgnn: error: {run}/checkpoints/step-\d+\.pt: could not be written \(", line
    )
    assert "bytes free on its file system" in line
    assert list((run / "checkpoints").iterdir()) == []  # no temporary file, no partial .pt


def test_the_guard_wants_room_for_the_next_event_and_one_more(tmp_path, monkeypatch):
    target = tmp_path / "out.h5"
    target.write_bytes(b"")
    free = {"bytes": 10 * 2**20}
    monkeypatch.setattr(
        output_files.shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(0, 0, free["bytes"])
    )
    guard = SpaceGuard(target, [target])
    guard.check(next_bytes=2**20)  # 1.1 MiB + reserve fits in 10 MiB
    target.write_bytes(b"x" * 3 * 2**20)
    guard.written()
    assert guard.largest_event == 3 * 2**20
    free["bytes"] = int(1.1 * 2**20) + 3 * 2**20 + RESERVE_BYTES - 1
    with pytest.raises(OutputError, match=r"out\.h5: stopped before the disk is full"):
        guard.check(next_bytes=2**20)


def test_outputs_on_a_read_only_file_system_are_one_line(pipeline, read_only_disk, capfd):
    """train, compare and inspect --plot each name the path they could not write; exit 2 (a
    destination that cannot be written, as where the path is checked before any work)."""
    cases = {
        "train": ("train", "--config", str(pipeline["config"]), "--set",
                  f"run.dir={read_only_disk / 'run'}"),
        "compare": ("compare", str(pipeline["run"]), "--out", str(read_only_disk / "report")),
        "inspect": ("inspect", str(pipeline["shards"]), "--plot",
                    str(read_only_disk / "partition.png")),
    }  # fmt: skip
    for name, argv in cases.items():
        done = run_partgnn_in_process(*argv, capfd=capfd)
        assert done.returncode == 2, (name, done.stderr[-2000:])
        line = _error_line(done)
        assert line.startswith(f"partgnn: error: {read_only_disk}"), (name, line)
        assert "Read-only file system" in line and "PARTGNN_DEBUG" not in line, (name, line)
    assert list(read_only_disk.iterdir()) == []


def test_plots_and_reports_on_a_full_disk_leave_nothing(pipeline, small_disk, capfd):
    filler = small_disk / "filler"
    filler.write_bytes(b"x" * (60 * 1024))  # leaves a few KiB: less than a plot
    for argv, output in (
        (("inspect", str(pipeline["shards"]), "--plot", str(small_disk / "p.png")), "p.png"),
        (("compare", str(pipeline["run"]), "--out", str(small_disk / "report")), "report"),
    ):
        done = run_partgnn_in_process(*argv, capfd=capfd)
        assert done.returncode == 1, done.stderr[-2000:]
        line = _error_line(done)
        assert line.startswith(f"partgnn: error: {small_disk}"), line
        assert "No space left on device" in line, line
        assert sorted(p.name for p in small_disk.iterdir()) == ["filler"], output
