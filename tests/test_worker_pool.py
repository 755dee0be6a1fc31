"""The one process pool behind every ``--workers`` option: results in the items' order, a
task's error raised in the caller, tasks in this process for one worker."""

from __future__ import annotations

import os
import signal

import pytest

from partgnn.errors import InputError, Stopped, clear_stop, request_stop
from partgnn.worker_pool import ordered_map


def _square_and_pid(value: int) -> tuple[int, int]:
    return value * value, os.getpid()


def _refuse_three(value: int) -> int:
    if value == 3:
        raise InputError(f"item {value}: refused")
    return value


def test_results_come_in_the_items_order_from_other_processes():
    results = list(ordered_map(_square_and_pid, range(7), n_items=7, workers=2))
    assert [square for square, _ in results] == [v * v for v in range(7)]
    assert os.getpid() not in {pid for _, pid in results}


def test_one_worker_runs_the_tasks_in_this_process():
    results = list(ordered_map(_square_and_pid, range(3), n_items=3, workers=1))
    assert {pid for _, pid in results} == {os.getpid()}


def test_a_tasks_error_is_raised_in_the_caller():
    with pytest.raises(InputError, match="item 3: refused"):
        list(ordered_map(_refuse_three, range(6), n_items=6, workers=2))


def test_a_stop_python_swallowed_ends_the_map_after_the_item_at_hand():
    """A signal that came while a ``__del__`` ran has its stop recorded and its exception
    swallowed: the map stops before the next result, not after the last item."""
    done = []

    def task(item: int) -> int:
        done.append(item)
        if item == 2:
            request_stop(signal.SIGTERM)  # what the command line's handler records
        return item

    try:
        with pytest.raises(Stopped):
            list(ordered_map(task, range(10), n_items=10, workers=1))
    finally:
        clear_stop()
    assert done == [0, 1, 2]
