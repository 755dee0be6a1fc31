"""Keeping decoded events across epochs, and reading the next one ahead.

Decoding an event (HDF5 read and decompression, the exchange plan moved to the device, the
boundary mask) costs as much as a small training step. :class:`CachedSource` keeps every
:class:`~partgnn.train.items.train_item.TrainItem` it builds, on its device, until a memory budget
is spent; events past the budget are read again each time, but the next one is read ahead in a
background thread while the current step computes. On a GPU the read-ahead copies on a stream of
its own (from pinned memory: :func:`~partgnn.train.items.train_item.to_device`), so they overlap the
step's kernels instead of queueing behind them on the default stream; the step's stream waits
for that copy before it uses the item. The items are never modified by training,
so a cached item and a re-read one are the same bytes: results do not depend on the cache.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

import torch

from partgnn.train.items.train_item import TrainItem


class ItemSource(Protocol):
    """What :class:`CachedSource` wraps: ``event_ids``, ``item(index)`` and
    ``event_size(index)``."""

    event_ids: list[int]

    def item(self, index: int) -> TrainItem: ...

    def event_size(self, index: int) -> int: ...


def item_tensors(item: TrainItem) -> list[torch.Tensor]:
    """The tensors an item holds: its node and edge arrays, and its exchange's send index and
    interior-first edge order."""
    tensors = [getattr(item, f.name) for f in dataclasses.fields(item)]
    if item.exchange is not None:
        tensors.append(item.exchange.send_index)
    if item.interior_first is not None:
        tensors += [item.interior_first.order, item.interior_first.inverse]
    return [tensor for tensor in tensors if isinstance(tensor, torch.Tensor)]


def item_nbytes(item: TrainItem) -> int:
    """Bytes of the tensors an item holds (:func:`item_tensors`)."""
    return sum(tensor.numel() * tensor.element_size() for tensor in item_tensors(item))


@dataclasses.dataclass
class CacheStatistics:
    """How the cache served: hits, misses (items read), prefetched reads, bytes kept."""

    hits: int = 0
    misses: int = 0
    prefetched: int = 0
    cached_items: int = 0
    cached_bytes: int = 0


class CachedSource:
    """A source whose items are kept within ``budget_bytes`` and read ahead otherwise.

    Args:
        source: The wrapped source (whole graphs, halo shards or naive sectors).
        budget_bytes: Most bytes of items kept; 0 keeps none (every access reads the event).
        prefetch: Read the item named by :meth:`prefetch` in a background thread.
        device: Where the items live (a GPU: read ahead on a stream of its own).
    """

    def __init__(
        self,
        source: ItemSource,
        budget_bytes: int,
        *,
        prefetch: bool = True,
        device: torch.device | None = None,
    ) -> None:
        self.source = source
        self.event_ids = source.event_ids
        self.budget_bytes = budget_bytes
        self.statistics = CacheStatistics()
        self._items: dict[int, TrainItem] = {}
        self._pending: dict[int, Future[tuple[TrainItem, torch.cuda.Event | None]]] = {}
        self._executor = ThreadPoolExecutor(max_workers=1) if prefetch else None
        self._stream = None
        if prefetch and device is not None and device.type == "cuda":
            self._stream = torch.cuda.Stream(device)

    def __len__(self) -> int:
        return len(self.event_ids)

    def item(self, index: int) -> TrainItem:
        """The item of event ``index``: from the cache, a finished read-ahead, or read now."""
        cached = self._items.get(index)
        if cached is not None:
            self.statistics.hits += 1
            return cached
        pending = self._pending.pop(index, None)
        if pending is not None:
            item, copied = pending.result()
            if copied is not None:
                _use_on_current_stream(item, copied)
            self.statistics.prefetched += 1
        else:
            item = self.source.item(index)
            self.statistics.misses += 1
        self._keep(index, item)
        return item

    def event_size(self, index: int) -> int:
        """The event graph's edges (the wrapped source's)."""
        return self.source.event_size(index)

    def prefetch(self, index: int) -> None:
        """Starts reading event ``index`` in the background unless it is cached or pending."""
        if self._executor is None or index in self._items or index in self._pending:
            return
        self._pending[index] = self._executor.submit(self._read_ahead, index)

    def _read_ahead(self, index: int) -> tuple[TrainItem, torch.cuda.Event | None]:
        """Reads an item (on the read-ahead stream on a GPU: with the event its copies end)."""
        if self._stream is None:
            return self.source.item(index), None
        with torch.cuda.stream(self._stream):
            item = self.source.item(index)
            copied = torch.cuda.Event()
            copied.record(self._stream)
        return item, copied

    def close(self) -> None:
        """Waits for any read-ahead and drops the items; later reads go to the source."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        self._pending.clear()
        self._items.clear()

    def _keep(self, index: int, item: TrainItem) -> None:
        size = item_nbytes(item)
        if self.statistics.cached_bytes + size <= self.budget_bytes:
            self._items[index] = item
            self.statistics.cached_items += 1
            self.statistics.cached_bytes += size


def _use_on_current_stream(item: TrainItem, copied: torch.cuda.Event) -> None:
    """Orders the current stream after the item's copies, and tells the allocator the item's
    tensors are used there (else it could hand their memory to the read-ahead stream again
    while the step still reads them)."""
    stream = torch.cuda.current_stream()
    stream.wait_event(copied)
    for tensor in item_tensors(item):
        if tensor.is_cuda:
            tensor.record_stream(stream)
