"""Fitting a module map: the module pairs (and triplets) the true doublets of training events
lie on, with windows from the statistics of their features, reduced a chunk of events at a time
(memory stays bounded however many events are read)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from partgnn.data.module_map.map_file import (
    WINDOW_FEATURES,
    EventDoublets,
    ModuleMap,
    ModuleTriplets,
)
from partgnn.errors import InputError

#: Doublets a module pair needs to count as well sampled (the window floor's reference).
BUSY_PAIR_DOUBLETS = 20


def fit_module_map(
    doublets: Iterable[EventDoublets],
    *,
    window: str = "minmax",
    width: float = 0.0,
    settings: dict | None = None,
    chunk_doublets: int = 2_000_000,
    floor: float | Sequence[float] = 0.0,
    triplet_floor: float = 0.0,
) -> ModuleMap:
    """Fits a module map to training doublets (and triplets), streaming: the doublets of a few
    events at a time are reduced to per-pair statistics (count, min, max, sum, sum of squares)
    and merged into the running ones, so memory grows with the module pairs, not the events.

    Args:
        doublets: Per event, :data:`EventDoublets`; events that carry triplets give the map
            its :class:`ModuleTriplets` ([min, max] windows).
        window: ``"minmax"`` (``[min, max]`` widened by ``width`` times its width each side)
            or ``"rms"`` (``mean +- width * rms``).
        width: See ``window``.
        settings: Recorded with the map.
        chunk_doublets: Doublets gathered before each reduction.
        floor: Widen every window by ``floor`` times the median width (per feature) of the
            ``minmax`` windows of well-sampled pairs (at least :data:`BUSY_PAIR_DOUBLETS`
            doublets) on each side: a pair seen a few times has a window of nearly a point.
            One value for every feature, or one per feature (:data:`WINDOW_FEATURES` order).
        triplet_floor: The same for the triplets' windows (one value).

    Raises:
        InputError: No doublets, an unknown window kind, or a floor of another length.
    """
    if window not in ("minmax", "rms"):
        raise InputError(f"module map: window must be minmax or rms (got {window!r})")
    floors = np.atleast_1d(np.asarray(floor, dtype=np.float64))
    if floors.shape not in ((1,), (len(WINDOW_FEATURES),)) or not (floors >= 0).all():
        raise InputError(
            f"module map: the floor is one value >= 0 or one per window feature "
            f"({', '.join(WINDOW_FEATURES)}) (got {floor!r})"
        )
    if not triplet_floor >= 0:
        raise InputError(f"module map: the triplet floor must be >= 0 (got {triplet_floor})")
    floors = np.broadcast_to(floors, (len(WINDOW_FEATURES),))
    pairs, triplets = _StreamingStatistics(chunk_doublets), _StreamingStatistics(chunk_doublets)
    for event in doublets:
        source, target, features = event[:3]
        pairs.add(np.stack([source, target], axis=1), features)
        if len(event) == 5:
            triplets.add(*event[3:])
    stats = pairs.result()
    if stats is None:
        raise InputError("module map: the training events have no true doublets")
    if window == "minmax":
        spread = (stats.high - stats.low) * width
        low, high = stats.low - spread, stats.high + spread
    else:
        mean = stats.total / stats.count[:, None]
        rms = np.sqrt(np.maximum(stats.squares / stats.count[:, None] - mean**2, 0.0))
        low, high = mean - width * rms, mean + width * rms
    if floors.any():
        typical = typical_widths(stats.low, stats.high, stats.count, "module pair", "--floor")
        low, high = low - floors * typical, high + floors * typical
    found = triplets.result()
    module_triplets = None
    if found is not None:
        low_t, high_t = found.low, found.high
        if triplet_floor > 0:
            typical = typical_widths(
                found.low, found.high, found.count, "module triplet", "--triplet-floor"
            )
            low_t, high_t = low_t - triplet_floor * typical, high_t + triplet_floor * typical
        module_triplets = ModuleTriplets(found.keys, low_t, high_t, found.count)
    recorded = float(floors[0]) if np.ndim(floor) == 0 else floors.tolist()  # as given
    return ModuleMap(
        stats.keys[:, 0], stats.keys[:, 1], low, high, stats.count,
        {"window": window, "width": width, "floor": recorded,
         **({"triplet_floor": triplet_floor} if found is not None else {}),
         **(settings or {})},
        module_triplets,
    )  # fmt: skip


def typical_widths(
    low: np.ndarray, high: np.ndarray, count: np.ndarray, what: str, option: str
) -> np.ndarray:
    """Median [min, max] width per feature of the rows seen >= :data:`BUSY_PAIR_DOUBLETS`
    times (the floors' unit), of windows ``low``/``high`` ``(R, F)`` seen ``count`` ``(R,)`` times.

    Raises:
        InputError: No row is seen that often (naming ``what`` and the ``option`` to drop).
    """
    busy = count >= BUSY_PAIR_DOUBLETS
    if not busy.any():
        raise InputError(
            f"module map: no {what} has {BUSY_PAIR_DOUBLETS} doublets to set the window floor "
            f"from (fit more events or drop {option})"
        )
    return np.median((high - low).astype(np.float64)[busy], axis=0)


class _StreamingStatistics:
    """Rows keyed by module tuples, reduced to :class:`_KeyStatistics` a chunk at a time."""

    def __init__(self, chunk_rows: int) -> None:
        self.chunk_rows = chunk_rows
        self.running: _KeyStatistics | None = None
        self.pending: list[_KeyStatistics] = []
        self.n_pending = 0

    def add(self, keys: np.ndarray, features: np.ndarray) -> None:
        if len(keys) == 0:
            return
        self.pending.append(_KeyStatistics.of_rows(keys, features))
        self.n_pending += len(keys)
        if self.n_pending >= self.chunk_rows:
            self._merge()

    def result(self) -> _KeyStatistics | None:
        if self.pending:
            self._merge()
        return self.running

    def _merge(self) -> None:
        parts = [self.running, *self.pending] if self.running else self.pending
        self.running = _KeyStatistics.merged(parts)
        self.pending, self.n_pending = [], 0


@dataclass(frozen=True)
class _KeyStatistics:
    """Per key (a row of module keys, sorted lexicographically): row count and, per feature,
    min, max, sum and sum of squares."""

    keys: np.ndarray
    count: np.ndarray
    low: np.ndarray
    high: np.ndarray
    total: np.ndarray
    squares: np.ndarray

    @classmethod
    def of_rows(cls, keys: np.ndarray, features: np.ndarray) -> _KeyStatistics:
        """Statistics of single rows, to be merged: ``keys (M, k)``, ``features (M, f)``."""
        ones = np.ones(len(keys), dtype=np.int64)
        return cls(keys, ones, features, features, features, features**2)

    @classmethod
    def merged(cls, parts: list[_KeyStatistics]) -> _KeyStatistics:
        """The statistics of all ``parts`` together, one row per key."""
        keys = np.concatenate([p.keys for p in parts])
        order = np.lexsort(keys.T[::-1])
        keys = keys[order]
        new = np.ones(len(order), dtype=bool)
        new[1:] = (keys[1:] != keys[:-1]).any(axis=1)
        starts = np.flatnonzero(new)

        def reduce(name: str, ufunc: np.ufunc) -> np.ndarray:
            values = np.concatenate([getattr(p, name) for p in parts])[order]
            return ufunc.reduceat(values, starts, axis=0)

        return cls(
            keys[starts], reduce("count", np.add), reduce("low", np.minimum),
            reduce("high", np.maximum), reduce("total", np.add), reduce("squares", np.add),
        )  # fmt: skip
