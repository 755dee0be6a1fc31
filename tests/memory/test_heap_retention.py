"""run.keep_freed_heap: glibc keeps freed memory, so an event-sized temporary allocated again is
not faulted in afresh. Measured in a process of its own (the setting is process-wide)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from partgnn.memory.c_library import c_function

PROBE = """
import json, resource, sys, torch
from partgnn.memory.heap_retention import keep_freed_heap
kept = keep_freed_heap() if sys.argv[1] == "keep" else None
def step():  # a training step's event-sized temporaries, 64 MB each (above any mmap threshold)
    kept = []
    for _ in range(4):
        kept.append(torch.ones(64 * 2**20 // 4) + 1)
    return sum(float(t[0]) for t in kept)
for _ in range(3):  # the heap's layout settles over the first steps (a temporary and a result
    step()  # interleave), then stays: the steady state is measured
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    step()
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps({"kept": kept, "faults": faults}))
"""


def _faults(mode: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


@pytest.mark.skipif(c_function("mallopt") is None, reason="needs glibc's mallopt")
def test_kept_heap_reuses_event_sized_temporaries_without_faults():
    returned, kept = _faults("return"), _faults("keep")
    assert kept["kept"] is True
    # 5 steps x 8 x 64 MB faulted in page by page (16k pages each) when returned; reused when
    # kept.
    assert returned["faults"] >= 5 * 8 * 16_000
    assert kept["faults"] < returned["faults"] / 10
