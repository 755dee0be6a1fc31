"""Tests of partgnn.memory.meters: live heap bytes and the resident set's growth."""

from __future__ import annotations

import pytest
import torch

from partgnn.memory.meters import (
    HeapMeter,
    ResidentMeter,
    heap_meter_available,
    resident_meter_available,
)

MIB = 2**20


@pytest.mark.skipif(not resident_meter_available(), reason="needs Linux /proc/self/clear_refs")
def test_the_resident_growth_counts_pages_touched_and_freed_within_not_before():
    before = torch.ones(64 * MIB // 4)  # resident before: not the body's growth
    with ResidentMeter() as idle:
        pass
    with ResidentMeter() as busy:
        touched = torch.ones(64 * MIB // 4)
        del touched  # freed again: the peak stays
    assert idle.peak < 16 * MIB
    assert 60 * MIB < busy.peak < 96 * MIB
    del before


@pytest.mark.skipif(not heap_meter_available(), reason="needs glibc mallinfo2")
def test_the_heap_peak_counts_live_tensors_after_each_op():
    with HeapMeter() as meter:
        kept = torch.zeros(8 * MIB // 4) + 1
    assert 8 * MIB <= meter.peak < 20 * MIB
    assert meter.now() >= 8 * MIB
    del kept
