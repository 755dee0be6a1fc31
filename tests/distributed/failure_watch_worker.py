"""One rank of the failure-watch test: ``python -m tests.distributed.failure_watch_worker``.

Rank 1 fails with a bad-input error (leaving its notice); rank 0 meanwhile blocks in a call that
never returns to Python on its own, as a rank does in a NCCL collective whose peer is gone. The
session's failure watch must end rank 0 with rank 1's report and status.
"""

from __future__ import annotations

import sys
import time

from partgnn.distributed.session import distributed_session
from partgnn.errors import InputError, describe, exit_status


def main() -> int:
    try:
        with distributed_session(device="cpu", timeout_s=60, watch_failures=True) as context:
            if context.global_rank == 1:
                raise InputError("events.h5: event 7 is unreadable")
            time.sleep(600)  # stands for a NCCL collective that never returns
    except InputError as err:
        print(f"partgnn: error: {describe(err)}", file=sys.stderr)
        return exit_status(err)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
