"""Measure the heap memory a model's forward keeps and the peak of a training step, on the CPU.

The C allocator's bytes in use (glibc ``mallinfo2``: all arenas plus mmapped blocks; torch's
CPU tensors live there) are read after every op while a :class:`HeapMeter` is active, the
backward pass's and recomputed forwards' ops included (a ``TorchDispatchMode`` follows autograd
into the backward). A peak is therefore a peak of live tensors, up to one op's temporaries.
Linux with glibc only; :func:`heap_meter_available` says whether it works here.

What the operating system counts is more: freed chunks glibc keeps resident between live ones
and one op's temporaries. :class:`ResidentMeter` measures that, the growth of the process's
resident set (Linux ``VmHWM`` after resetting it), which is what a rank's peak RSS is made of.
"""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from partgnn.memory.c_library import c_function
from partgnn.memory.heap_release import release_free_heap

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


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


def _status_kib(field: str) -> int:
    return int(_STATUS.read_text().split(f"{field}:")[1].split()[0])


@cache
def resident_meter_available() -> bool:
    """Whether this process can reset and read its resident-set high-water mark (Linux; asked
    once per process, not before every probe step)."""
    try:
        _status_kib("VmHWM")
        with open(_CLEAR_REFS, "w") as handle:
            handle.write("5")
    except (OSError, IndexError, ValueError):
        return False
    return True


class ResidentMeter:
    """Within ``with ResidentMeter() as meter:`` the process's resident set grows by at most
    ``meter.peak`` bytes (read on exit).

    On entry the C heap's free pages are given back (``malloc_trim``) and the kernel's
    high-water mark is reset to the current resident set, so the peak is what the body itself
    touched: live tensors, one op's temporaries and the freed chunks glibc kept resident.
    """

    def __enter__(self) -> ResidentMeter:
        release_free_heap(torch.device("cpu"))
        _CLEAR_REFS.write_text("5")  # VmHWM := VmRSS
        self.start = _status_kib("VmHWM") * 1024
        self.peak = 0
        return self

    def __exit__(self, *exc) -> None:
        self.peak = max(0, _status_kib("VmHWM") * 1024 - self.start)
