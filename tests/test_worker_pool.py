"""The one process pool behind every ``--workers`` option: results in the items' order, a
task's error raised in the caller, tasks in this process for one worker."""

from __future__ import annotations

import os

import pytest

from partgnn.errors import InputError
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
