"""Measure the heap memory a model's forward keeps and the peak of a training step, on the CPU.

The C allocator's bytes in use (glibc ``mallinfo2``: all arenas plus mmapped blocks; torch's
CPU tensors live there) are read after every op while a :class:`HeapMeter` is active, the
backward pass's and recomputed forwards' ops included (a ``TorchDispatchMode`` follows autograd
into the backward). A peak is therefore a peak of live tensors, up to one op's temporaries.
Linux with glibc only; :func:`heap_meter_available` says whether it works here.
"""

from __future__ import annotations

import ctypes
from functools import cache

from torch.utils._python_dispatch import TorchDispatchMode

from partgnn.models.c_library import c_function


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


@cache
def _mallinfo2():
    function = c_function("mallinfo2")
    if function is not None:
        function.restype = _MallInfo2
    return function


def heap_meter_available() -> bool:
    """Whether the C library reports its bytes in use (glibc >= 2.33)."""
    return _mallinfo2() is not None


def heap_bytes() -> int:
    """Bytes the C allocator has handed out and not taken back (all arenas + mmapped).

    Raises:
        RuntimeError: The C library has no ``mallinfo2``.
    """
    mallinfo2 = _mallinfo2()
    if mallinfo2 is None:
        raise RuntimeError("heap_bytes needs glibc's mallinfo2 (glibc >= 2.33)")
    info = mallinfo2()
    return info.uordblks + info.hblkhd


class HeapMeter(TorchDispatchMode):
    """Within ``with HeapMeter() as meter:``, ``meter.peak`` is the most heap bytes in use
    after any op, above ``meter.start`` (the bytes in use on entry); :meth:`now` is the
    current value above the start."""

    def __enter__(self) -> HeapMeter:
        self.start = heap_bytes()
        self.peak = 0
        return super().__enter__()

    def now(self) -> int:
        """Heap bytes in use now, above those on entry."""
        return heap_bytes() - self.start

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.peak = max(self.peak, heap_bytes() - self.start)
        return out
