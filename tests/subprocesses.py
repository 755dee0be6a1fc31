"""Running a command from a test under a deadline shorter than pytest's, so that a hung command
fails with its own output instead of being killed by pytest with nothing shown."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

#: pytest's per-test timeout ([tool.pytest.ini_options] timeout in pyproject.toml).
PYTEST_TIMEOUT_S = 300

#: The longest a test's command may run: below pytest's timeout, with room for the test's
#: own work around it. A command (and every process it started) is killed past it.
DEADLINE_S = 240

#: What a command's deadline leaves of pytest's timeout for the test to report its output.
REPORT_MARGIN_S = 20.0

#: When the running test started (``time.monotonic()``; set by tests/conftest.py).
_test_started: float | None = None


def mark_test_start(now: float) -> None:
    """Records the start of the test now running (tests/conftest.py's autouse fixture)."""
    global _test_started
    _test_started = now


def deadline_within_test(timeout: float) -> float:
    """``timeout``, shortened so that it ends :data:`REPORT_MARGIN_S` before pytest's timeout
    of the running test: work the test did before (an in-process reference, a kernel build on
    a busy machine) does not push a command past pytest's kill, where its output is lost."""
    if _test_started is None:
        return timeout
    left = PYTEST_TIMEOUT_S - (time.monotonic() - _test_started) - REPORT_MARGIN_S
    return max(1.0, min(timeout, left))


def run_command(
    command: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike[str] | Path | None = None,
    timeout: float = DEADLINE_S,
) -> subprocess.CompletedProcess[str]:
    """Runs ``command`` (text output captured, no stdin) and returns what it did.

    Raises:
        AssertionError: It ran past ``timeout``; the message holds the tail of its stdout and
            stderr. The command leads its own process group, which is killed whole, so the
            ranks a launcher started (torchrun, mpirun) do not outlive it.
    """
    assert timeout < PYTEST_TIMEOUT_S, f"timeout {timeout} s is not below pytest's"
    timeout = deadline_within_test(timeout)
    process = subprocess.Popen(
        command,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        raise AssertionError(
            f"{' '.join(map(str, command))}: still running after {timeout:g} s, killed\n"
            f"--- stdout (tail)\n{stdout[-3000:]}\n--- stderr (tail)\n{stderr[-3000:]}"
        ) from None
    finally:
        # What the command started and left behind (its group) goes too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
