"""Give the C heap's free pages back to the operating system (CPU tensors, glibc).

Recomputing an edge MLP chunk by chunk allocates and frees the same chunk-sized temporaries
(MBs, below glibc's mmap threshold, so they live in its arenas) over and over, while tensors the
backward pass keeps (gradients, recomputed latents of the next region) are allocated between
them. glibc returns free memory to the system only from the top of an arena, so the freed
chunks stay resident: at 1e6 edges the peak RSS was 1.3x the bytes in use.
:func:`release_free_heap` (``malloc_trim``) drops the free pages wherever they are; called after
each chunked edge MLP of an event-sized graph, forward and backward, it cut the peak RSS at 1e6
edges from 3.7-4.6 GB (run to run) to 3.03-3.08 GB for ~2 % more step time
(docs/history/training.md, "Lean memory").

Which computations release is a :class:`HeapReleasePolicy` passed to them (the model holds one):
by default only those whose temporaries weigh :data:`RELEASE_MIN_BYTES` or more.

CUDA tensors are not in the C heap (torch's caching allocator holds them); elsewhere than glibc
this does nothing.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import cache

import torch

from partgnn.memory.c_library import c_function


@cache
def _malloc_trim():
    function = c_function("malloc_trim")
    if function is not None:
        function.argtypes, function.restype = [ctypes.c_size_t], ctypes.c_int
    return function


def release_free_heap(device: torch.device) -> bool:
    """Returns the C heap's free pages to the system if ``device`` is the CPU.

    Returns:
        Whether anything could be released (glibc's ``malloc_trim`` says so).
    """
    malloc_trim = _malloc_trim()
    if device.type != "cpu" or malloc_trim is None:
        return False
    return bool(malloc_trim(0))


#: After the chunks of an edge MLP whose first layer's output over all edges (``E x H``, float32)
#: weighs at least this much, the freed heap pages go back to the system (below it, re-faulting
#: them costs more than they weigh: +20 % step time at 1e5 edges, none measurable at 1e6).
RELEASE_MIN_BYTES = 128 * 2**20


@dataclass(frozen=True)
class HeapReleasePolicy:
    """Which chunked computations give their freed heap pages back after running.

    Attributes:
        min_bytes: Release after a computation over ``E`` rows of width ``W`` when its float32
            ``E x W`` output weighs at least this much (0: after every one, how the memory
            planner measures on a small probe graph what an event-sized graph's step holds).
    """

    min_bytes: int = RELEASE_MIN_BYTES

    def releases(self, rows: int, width: int) -> bool:
        """Whether a computation over ``rows`` rows of width ``width`` releases afterwards."""
        return rows * width * 4 >= self.min_bytes


#: Release after event-sized computations only (what training does).
DEFAULT_HEAP_RELEASE = HeapReleasePolicy()

#: Release after every computation, whatever its size.
ALWAYS_RELEASE_HEAP = HeapReleasePolicy(min_bytes=0)
