"""How a ``partgnn`` process ends when it is stopped or fails: signals become exceptions, and the
one-line reason is left where the launcher reports it.

- :func:`stop_on_signals`: SIGINT (Ctrl-C), SIGTERM (``timeout``, ``scancel``, a job's time
  limit, torchrun stopping its workers) and SIGHUP (a closed terminal) raise
  :class:`~partgnn.errors.Stopped` in the main thread, so the cleanups on the way out run (a
  staging file or folder is removed) and the command ends with one line and status 128 + the
  signal's number. The request is also recorded: an output is never committed after it
  (:func:`~partgnn.errors.raise_if_stopped`), even where Python swallowed the exception.
  Training replaces the SIGTERM handler while it trains: there SIGTERM means "checkpoint at
  the next step and stop" (:mod:`partgnn.train.stop_signals`).
- :func:`report_to_launcher`: under torchrun, the failing worker's line goes into the file
  named by ``TORCHELASTIC_ERROR_FILE``, which torchrun's error report prints (instead of "To
  enable traceback see ...").

Standard library only: it runs before torch loads.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from partgnn.errors import Stopped, clear_stop, raise_if_stopped, request_stop, stop_requested

#: Signals that stop a command with cleanup.
STOPPING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

#: The variable torchrun sets to the file each worker may write its error into.
ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, :data:`STOPPING_SIGNALS` record a stop request and raise
    :class:`Stopped` in the main thread; on leaving it, a request the block swallowed raises
    (and Python's report of the swallowed exception is left out).

    Outside the main thread it installs nothing (Python delivers signals to the main thread
    only).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        del frame
        # The first signal is the reason: Ctrl-C reaches torchrun and its workers at once,
        # and torchrun's SIGTERM to the workers follows; they were interrupted all the same.
        first = stop_requested() or signum
        request_stop(first)
        raise Stopped(first)

    def drop_swallowed_stop(unraisable: sys.UnraisableHookArgs) -> None:
        # The stop is recorded and raised again; Python's "Exception ignored in ..." report
        # of the swallowed one would only add a traceback to the one line.
        if not isinstance(unraisable.exc_value, Stopped):
            previous_hook(unraisable)

    clear_stop()
    previous = {number: signal.signal(number, stop) for number in STOPPING_SIGNALS}
    previous_hook, sys.unraisablehook = sys.unraisablehook, drop_swallowed_stop
    try:
        yield
        raise_if_stopped()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        sys.unraisablehook = previous_hook
        clear_stop()


def report_to_launcher(line: str) -> None:
    """Writes the one-line reason of a failure where torchrun's error report shows it.

    Does nothing outside torchrun (no ``TORCHELASTIC_ERROR_FILE``); never raises (the reason is
    on stderr in any case).
    """
    path = os.environ.get(ERROR_FILE_ENV)
    if not path:
        return
    # torchrun's own format (ErrorHandler.record_exception): its report prints py_callstack.
    record = {
        "message": {
            "message": line,
            "extraInfo": {"py_callstack": line, "timestamp": str(int(time.time()))},
        }
    }
    try:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
    except OSError:
        pass
