"""Functions of the process's C library (glibc's allocator: what CPU tensors live in)."""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache


@cache
def c_function(name: str):
    """The C library's function ``name`` (a ``ctypes`` function; set its ``restype`` and
    ``argtypes`` before calling), or ``None`` where the library has none (not glibc, or an old
    one)."""
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c")), name)
    except (OSError, AttributeError, TypeError):
        return None
