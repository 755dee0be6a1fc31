"""Stopping signals: the first one is the reason the command gives."""

from __future__ import annotations

import os
import signal

import pytest

from partgnn.cli.process_exit import stop_on_signals
from partgnn.errors import Stopped, describe, exit_status


def test_a_sigterm_after_ctrl_c_still_says_interrupted():
    """Ctrl-C reaches torchrun and its workers at once; torchrun's SIGTERM to the workers comes
    while they are stopping. They say "interrupted" and exit 130, not "stopped by SIGTERM"."""
    with pytest.raises(Stopped) as stopped, stop_on_signals():
        try:
            os.kill(os.getpid(), signal.SIGINT)
        except Stopped:
            os.kill(os.getpid(), signal.SIGTERM)  # during the cleanup
    assert stopped.value.signum == signal.SIGINT
    assert describe(stopped.value) == "interrupted"
    assert exit_status(stopped.value) == 130


def test_a_lone_sigterm_says_so():
    with pytest.raises(Stopped) as stopped, stop_on_signals():
        os.kill(os.getpid(), signal.SIGTERM)
    assert describe(stopped.value) == "stopped by SIGTERM"
    assert exit_status(stopped.value) == 143
