"""Running a command from a test under a deadline shorter than pytest's, so that a hung command
fails with its own output instead of being killed by pytest with nothing shown."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

#: pytest's per-test timeout ([tool.pytest.ini_options] timeout in pyproject.toml).
PYTEST_TIMEOUT_S = 300

#: The longest a test's command may run: below pytest's timeout, with room for the test's
#: own work around it. A command (and every process it started) is killed past it.
DEADLINE_S = 240


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
