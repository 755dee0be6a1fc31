"""Ordered work on worker processes: the one pool behind every ``--workers`` option
(``simulate``, ``build-graphs``, ``fit-module-map``, ``partition``).

Results come back in the order of the items, so the main process writes files exactly as one
process would: the same bytes for any number of workers.
"""

from __future__ import annotations

import multiprocessing
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

from partgnn.errors import raise_if_stopped

T = TypeVar("T")
R = TypeVar("R")


def ordered_map(
    task: Callable[[T], R], items: Iterable[T], *, n_items: int, workers: int
) -> Iterator[R]:
    """``task(item)`` for each item, in the items' order, on ``workers`` processes.

    With one worker (or one item) the tasks run in this process. Otherwise spawned workers (no
    inherited torch thread pools or open HDF5 handles) run one torch thread each; ``task`` and
    the items must be picklable, and a task that needs a large object (an events file, a
    module map) should open it once per process from a path it holds.

    A Ctrl-C stops only the main process, which ends the pool; if the consumer stops early or
    a task fails, the workers are killed (SIGKILL: METIS traps the pool's SIGTERM mid-call to
    print "Failed during initial partitioning").

    Args:
        task: A picklable callable (a module-level function or a dataclass instance).
        items: The tasks' arguments.
        n_items: How many items there are (the pool is no larger).
        workers: Processes to use.

    Yields:
        Each task's result, in the order of ``items``.
    """
    if workers <= 1 or n_items <= 1:
        yield from _stopping(map(task, items))
        return
    pool = ProcessPoolExecutor(
        min(workers, n_items),
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_one_torch_thread,
    )
    try:
        # Submitting starts the workers: all of them here, each item being submitted at once.
        yield from _stopping(_started_ignoring_ctrl_c(lambda: pool.map(task, items)))
    except BaseException:
        for worker in list((getattr(pool, "_processes", None) or {}).values()):
            worker.kill()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _stopping(results: Iterable[R]) -> Iterator[R]:
    """``results``, stopping before each one where a signal asked the process to stop: a stop
    Python swallowed (the signal came while a ``__del__`` ran) ends the command after the item
    at hand, not after the last (:func:`~partgnn.errors.raise_if_stopped`)."""
    for result in results:
        raise_if_stopped()
        yield result


def _started_ignoring_ctrl_c(start: Callable[[], T]) -> T:
    """``start()`` (which starts worker processes) with SIGINT ignored meanwhile.

    The workers inherit the ignoring through fork and exec, so Ctrl-C, which the terminal sends
    to every process of the group, stops only the main process: it ends the pool (terminating
    the workers) and prints its one line; the workers print nothing. A Ctrl-C in the moment
    the workers start (about 0.1 s) is ignored: press it again.
    """
    if threading.current_thread() is not threading.main_thread():
        return start()
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return start()
    finally:
        signal.signal(signal.SIGINT, handler)


def _one_torch_thread() -> None:
    import torch

    torch.set_num_threads(1)
