"""Report a failed peer while this rank is stuck in a NCCL collective.

Under gloo a collective whose peer left raises, and the session turns that into "rank R failed:
<reason>" (:mod:`partgnn.distributed.session`). Under NCCL it does not: the collective waits on
the GPU until PyTorch's watchdog aborts the whole process at the collective timeout, with no
Python exception and no reason. :class:`FailureWatch` is a daemon thread that polls the job's
store for failure notices (:mod:`partgnn.distributed.failure_notices`, one counter read every
:data:`POLL_S` seconds); when another rank left one, it prints the one-line report the session
would have printed and ends the process with that rank's exit status. A rank killed without a
notice (``kill -9``, host down) is still only caught by the watchdog at the timeout.
"""

from __future__ import annotations

import os
import sys
import threading

from partgnn.distributed.failure_notices import notices_left, read_notices

#: Seconds between two looks at the store.
POLL_S = 2.0


class FailureWatch:
    """``with FailureWatch():`` watches for other ranks' failure notices in the background.

    Args:
        poll_s: Seconds between two looks at the store.
    """

    def __init__(self, poll_s: float = POLL_S) -> None:
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="partgnn-failure-watch",
                                        daemon=True)  # fmt: skip

    def __enter__(self) -> FailureWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=self.poll_s + 1)

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            if notices_left() == 0:
                continue
            notices = read_notices()  # the other ranks' (this rank's own is its to report)
            if not notices or self._stop.is_set():
                continue
            reasons = "; ".join(f"rank {n.rank} failed: {n.reason}" for n in notices)
            print(f"partgnn: error: {reasons}", file=sys.stderr, flush=True)
            os._exit(notices[0].exit_code or 1)
