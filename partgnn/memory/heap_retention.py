"""Keep freed CPU memory in the process for reuse instead of giving it back at once (glibc).

glibc serves every allocation above its mmap threshold (at most 32 MB) with a fresh ``mmap`` and
returns it with ``munmap`` when freed, so each event-sized temporary of a training step
(``E x H`` latents: hundreds of MB on a full event graph) is faulted in page by page, and zeroed
by the kernel, every time it is allocated again. Unchunked models (``model.batch_norm``,
``model.concat_initial``) allocate many of them: on half a full pile-up-200 event (0.28M edges,
one rank's share) a step of the reference-style model took 23.0 s, 15.1 s of it in the kernel
(10M page faults), and 7.3 s with the freed memory kept; the default model's step 4.8 s and
3.9 s (docs/history/training.md, "Freed memory kept").

:func:`keep_freed_heap` makes glibc serve large allocations from its heap too (``M_MMAP_MAX``
0) and trim the heap's top only above 2 GB of free memory (``M_TRIM_THRESHOLD``): freed
temporaries are reused without faults, and the resident memory stays at the step's peak
between steps. A process-wide setting of the C library: the ``partgnn train`` command applies it
(``run.keep_freed_heap``); :func:`~partgnn.memory.heap_release.release_free_heap` still gives
free pages back where a computation asks. Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes

from partgnn.memory.c_library import c_function

#: glibc's ``mallopt`` parameters.
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
#: The heap's free top is given back above this many bytes (the largest value ``mallopt`` takes).
TRIM_THRESHOLD = 2**31 - 1


def keep_freed_heap() -> bool:
    """Makes the C library keep freed memory for reuse (see the module docstring).

    Returns:
        Whether the library took the settings (``False`` where it is not glibc).
    """
    mallopt = c_function("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
