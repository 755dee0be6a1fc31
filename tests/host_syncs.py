"""Counting the calls that read a tensor on the host (a synchronisation on a GPU), on the CPU.

:class:`HostSyncCounter` counts, while it is active in the calling thread, the aten operators
whose result size or value the host must wait for: ``.item()``/``float()``/``bool()``
(``_local_scalar_dense``), ``nonzero``, boolean-mask indexing and ``masked_select``,
``repeat_interleave`` without an output size and ``unique``; and the Python calls that copy to
the host on a GPU (``Tensor.tolist``, ``Tensor.cpu``, ``Tensor.numpy``). On the CPU nothing
waits, but the same code on a GPU would, so the counts are what a GPU step would pay.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_aten = torch.ops.aten
_READS_VALUE = {
    _aten._local_scalar_dense.default: "item",
    _aten.nonzero.default: "nonzero",
    _aten.masked_select.default: "masked_select",
    _aten.unique_dim.default: "unique",
    _aten._unique2.default: "unique",
    _aten.repeat_interleave.Tensor: "repeat_interleave",
}
_INDEXING = {_aten.index.Tensor, _aten.index_put_.default, _aten.index_put.default}
_HOST_COPIES = ("tolist", "cpu", "numpy")


def _bool_index(indices) -> bool:
    return any(
        isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices or ()
    )


class HostSyncCounter(TorchDispatchMode):
    """``with HostSyncCounter() as counter:`` ... ``counter.counts`` (by kind).

    ``with HostSyncCounter.paused():`` leaves out calls on tensors the code keeps on the host
    also on a GPU (e.g. AdamW's step counters).
    """

    _paused = 0

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()
        self._originals: dict[str, object] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = _READS_VALUE.get(func)
        if func is _aten.repeat_interleave.Tensor and kwargs.get("output_size") is not None:
            kind = None
        if func in _INDEXING and _bool_index(args[1] if len(args) > 1 else None):
            kind = "boolean mask"
        if kind is not None and not HostSyncCounter._paused:
            self.counts[kind] += 1
        return func(*args, **kwargs)

    def __enter__(self) -> HostSyncCounter:
        for name in _HOST_COPIES:
            original = getattr(torch.Tensor, name)
            self._originals[name] = original
            setattr(torch.Tensor, name, self._counting(name, original))
        return super().__enter__()

    def __exit__(self, *exc) -> None:
        for name, original in self._originals.items():
            setattr(torch.Tensor, name, original)
        self._originals.clear()
        return super().__exit__(*exc)

    def _counting(self, name: str, original):
        def counted(tensor, *args, **kwargs):
            if not HostSyncCounter._paused:
                self.counts[name] += 1
            return original(tensor, *args, **kwargs)

        return counted

    @classmethod
    @contextmanager
    def paused(cls) -> Iterator[None]:
        """No counting inside (for whatever counter is active)."""
        cls._paused += 1
        try:
            yield
        finally:
            cls._paused -= 1

    @property
    def total(self) -> int:
        """All counted calls."""
        return sum(self.counts.values())
