"""Give the C heap's free pages back to the operating system (CPU tensors, glibc).

Recomputing an edge MLP chunk by chunk allocates and frees the same chunk-sized temporaries
(MBs, below glibc's mmap threshold, so they live in its arenas) over and over, while tensors the
backward pass keeps (gradients, recomputed latents of the next region) are allocated between
them. glibc returns free memory to the system only from the top of an arena, so the freed
chunks stay resident: at 1e6 edges the peak RSS was 1.3x the bytes in use.
:func:`release_free_heap` (``malloc_trim``) drops the free pages wherever they are; called after
each chunked edge MLP of an event-sized graph, forward and backward, it cut the peak RSS at 1e6
edges from 3.7-4.6 GB (run to run) to 3.03-3.08 GB for ~2 % more step time
(docs/BENCHMARKS.md, "Lean memory (issue 12)").

CUDA tensors are not in the C heap (torch's caching allocator holds them); elsewhere than glibc
this does nothing.
"""

from __future__ import annotations

import ctypes
from functools import cache

import torch

from partgnn.models.c_library import c_function


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
