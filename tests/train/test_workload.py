"""What a run measures of itself: the gradient-wait clock (issue 25, item 5)."""

from __future__ import annotations

import time

import torch

from partgnn.train.workload import DeviceStopwatch, Workload


def test_the_stopwatch_sums_intervals_on_the_host_clock_on_cpus():
    clock = DeviceStopwatch(torch.device("cpu"))
    assert not clock.cuda
    for _ in range(2):
        start = clock.mark()
        time.sleep(0.01)
        clock.add(start, clock.mark())
    assert clock.seconds >= 0.02


def test_the_workload_times_the_reduction_on_its_devices_clock():
    workload = Workload(torch.device("cpu"))
    workload.add_time(1.5)
    workload.reduce_clock.add(2.0, 2.25)
    assert workload.step_seconds == 1.5
    assert workload.reduce_seconds == 0.25
