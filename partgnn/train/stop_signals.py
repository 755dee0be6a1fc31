"""Stop training cleanly when the scheduler asks: SIGTERM, or SIGUSR1 (what Slurm sends ahead of
preemption or the time limit with ``--signal=USR1@120``).

:class:`StopSignals` records the first such signal instead of dying; the trainer asks every step
(all ranks agree on the answer), finishes the step, writes a checkpoint and returns, and the
command exits with ``128 + signal number``. ``--resume auto`` continues from there.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

#: The signals that mean "stop at the next step boundary".
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class StopSignals:
    """Within ``with StopSignals() as stop:``, ``stop.received`` is the first stop signal's
    number (0 while none came). Outside the main thread it installs nothing (Python delivers
    signals to the main thread only)."""

    def __init__(self) -> None:
        self.received = 0
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for number in STOP_SIGNALS:
                self._previous[number] = signal.signal(number, self._record)
        return self

    def __exit__(self, *exc) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous.clear()

    def _record(self, number: int, frame: FrameType | None) -> None:
        del frame
        if not self.received:
            self.received = number


def signal_name(number: int) -> str:
    """``SIGTERM`` for 15."""
    return signal.Signals(number).name
