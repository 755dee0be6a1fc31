"""Module-map graph construction: the module pairs real tracks cross, learned from truth.

The method of L2IT's module map (used in GNN4ITk): from the truth of training events, record
every pair of detector modules that two consecutive hits of one particle lie on (a *doublet*
of modules), with windows on the quantities graph construction cuts on, per pair; a new
event's graph then joins two hits only when their modules are a recorded pair and the hit pair
falls in that pair's windows. A module is ``(layer index, module_id)`` of the events file:
TrackML events and simulated ones carry the TrackML detector's module ids
(:mod:`~partgnn.data.detector_modules`), so a map fitted on simulation applies to real events.

Windows (per module pair, over its training pairs, each oriented from the hit nearer the
particle's production vertex to the farther one): ``z0`` [mm], ``dphi`` [rad], ``phi_slope``
[rad/mm] and ``deta`` (:data:`WINDOW_FEATURES`); ``minmax`` keeps ``[min, max]`` widened by
``width`` times its width on each side, ``rms`` keeps ``mean +- width * rms``; ``floor``
widens every window further by a multiple (one, or one per quantity) of the typical width of
well-sampled pairs.

Glossary: a *doublet* is a pair of hits (or of modules) on a particle's path, consecutive
along it; a *candidate* is a hit pair on a recorded module pair, before the windows.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from partgnn.data.graph_features import cylindrical, slope_dr, wrap_phi
from partgnn.data.output_files import atomic_output
from partgnn.data.zip_records import check_zip_records
from partgnn.errors import InputError

#: The quantities a module pair's windows bound, in the order of :attr:`ModuleMap.low`.
WINDOW_FEATURES: tuple[str, ...] = ("z0", "dphi", "phi_slope", "deta")

#: What a module triplet's windows bound: how much z0 [mm] and phi slope [rad/mm] change from
#: its first doublet to its second (a track bends little between them).
TRIPLET_FEATURES: tuple[str, ...] = ("dz0", "dphi_slope")

#: Format tag of a module-map file.
MAP_FORMAT = "partgnn-module-map"

#: Doublets a module pair needs to count as well sampled (the window floor's reference).
BUSY_PAIR_DOUBLETS = 20

#: Most candidate hit pairs one event may produce (a guard against a map that joins everything).
MAX_CANDIDATES = 200_000_000

#: Candidates processed together by :func:`module_map_edges`.
CHUNK_CANDIDATES = 1 << 21


@dataclass(frozen=True)
class ModuleMap:
    """Recorded module pairs and their windows.

    Attributes:
        source: Module of the earlier hit of each pair ``(K,)``, int64 (see :func:`module_keys`),
            sorted with ``target``.
        target: Module of the later hit ``(K,)``, int64.
        low: Lower window bound of each pair and feature ``(K, 4)`` (:data:`WINDOW_FEATURES`).
        high: Upper bound ``(K, 4)``.
        count: Training doublets behind each pair ``(K,)``.
        settings: How it was fitted (events, pT cut, window kind and width).
        triplets: The module triplets tracks cross, with their windows, or ``None`` (a map of
            doublets only).
    """

    source: np.ndarray
    target: np.ndarray
    low: np.ndarray
    high: np.ndarray
    count: np.ndarray
    settings: dict
    triplets: ModuleTriplets | None = None

    def save(self, path: str | os.PathLike[str]) -> None:
        """Writes the map as an ``.npz`` file, atomically."""
        extra = {}
        if self.triplets is not None:
            extra = {f"triplet_{name}": getattr(self.triplets, name)
                     for name in ("modules", "low", "high", "count")}  # fmt: skip
        with atomic_output(path) as tmp, open(tmp, "wb") as handle:
            np.savez_compressed(
                handle, source=self.source, target=self.target, low=self.low, high=self.high,
                count=self.count, settings=np.array(json.dumps({"format": MAP_FORMAT,
                                                                **self.settings})),
                **extra,
            )  # fmt: skip

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ModuleMap:
        """Reads a map written by :meth:`save`.

        Raises:
            InputError: Missing, corrupted (a record's CRC-32 differs), not a module map, or
                its arrays disagree.
        """
        path = Path(path)
        if path.is_file():
            check_zip_records(path)
        try:
            with np.load(path, allow_pickle=False) as arrays:
                fields = {name: arrays[name] for name in arrays.files}
        except FileNotFoundError:
            raise InputError(f"{path}: file not found") from None
        except (OSError, ValueError) as err:
            raise InputError(f"{path}: not a module-map file ({err})") from None
        try:
            settings = json.loads(str(fields.pop("settings")))
            source, target = fields["source"], fields["target"]
            low, high, count = fields["low"], fields["high"], fields["count"]
        except (KeyError, json.JSONDecodeError) as err:
            raise InputError(f"{path}: not a module-map file (lacks {err})") from None
        if settings.pop("format", None) != MAP_FORMAT:
            raise InputError(f"{path}: not a module-map file (format tag missing)")
        k = len(source)
        if not (len(target) == len(count) == k and low.shape == high.shape == (k, 4)):
            raise InputError(f"{path}: the map's arrays disagree in length")
        triplets = None
        if "triplet_modules" in fields:
            try:
                triplets = ModuleTriplets(
                    *(fields[f"triplet_{name}"] for name in ("modules", "low", "high", "count"))
                )
            except KeyError as err:
                raise InputError(f"{path}: not a module-map file (lacks {err})") from None
            t = len(triplets.count)
            n = len(TRIPLET_FEATURES)
            if not (
                triplets.modules.shape == (t, 3)
                and triplets.low.shape == triplets.high.shape == (t, n)
            ):
                raise InputError(f"{path}: the map's triplet arrays disagree in length")
        return cls(source, target, low, high, count, settings, triplets)  # fmt: skip

    def __len__(self) -> int:
        return len(self.source)

    def unseen_pair_share(self) -> float:
        """The share of a new event's true doublets expected on module pairs the map never
        recorded: the Good-Turing estimate, pairs seen once over all doublets seen (0 for an
        empty map)."""
        total = int(self.count.sum())
        return int((self.count == 1).sum()) / total if total else 0.0

    def unmapped_hits(self, module: np.ndarray) -> int:
        """How many hits lie on modules in none of the map's pairs (their edges cannot be
        built).

        Args:
            module: Module of each hit ``(N,)`` (:func:`module_keys`).
        """
        mapped = np.union1d(self.source, self.target)
        return int((~np.isin(module, mapped)).sum())


@dataclass(frozen=True)
class ModuleTriplets:
    """Module triplets (three consecutive hits of a track) and their windows.

    Attributes:
        modules: ``(T, 3)`` int64 module keys of the three hits, sorted row-wise
            lexicographically.
        low: Lower window bound of each triplet and :data:`TRIPLET_FEATURES` ``(T, 2)``.
        high: Upper bound ``(T, 2)``.
        count: Training triplets behind each row ``(T,)``.
    """

    modules: np.ndarray
    low: np.ndarray
    high: np.ndarray
    count: np.ndarray


def module_keys(layer: np.ndarray, module_id: np.ndarray) -> np.ndarray:
    """One int64 per hit naming its module: ``layer index * 2**32 + module_id``, (N,)."""
    return np.asarray(layer, dtype=np.int64) * (1 << 32) + np.asarray(module_id, dtype=np.int64)


def pair_features(xyz: np.ndarray, first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """:data:`WINDOW_FEATURES` of hit pairs from ``first`` to ``second`` ``(M, 4)``, float64."""
    r, phi, z, eta = cylindrical(xyz)
    dr = slope_dr(r[second] - r[first])
    dphi = wrap_phi(phi[second] - phi[first])
    z0 = z[first] - r[first] * (z[second] - z[first]) / dr
    return np.stack([z0, dphi, dphi / dr, eta[second] - eta[first]], axis=1)


def triplet_features(xyz: np.ndarray, hits: np.ndarray) -> np.ndarray:
    """:data:`TRIPLET_FEATURES` of hit triplets ``(T, 3)`` (consecutive along a track):
    ``(T, 2)``, float64."""
    first = pair_features(xyz, hits[:, 0], hits[:, 1])
    second = pair_features(xyz, hits[:, 1], hits[:, 2])
    return _triplet_features(first, second)


def _triplet_features(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """:data:`TRIPLET_FEATURES` from the :func:`pair_features` of the two doublets."""
    return np.stack([second[:, 0] - first[:, 0], second[:, 2] - first[:, 2]], axis=1)


def consecutive_triplets(pairs: np.ndarray) -> np.ndarray:
    """Hit triplets ``(a, b, c)`` ``(T, 3)`` made of two pairs ``(a, b)`` and ``(b, c)`` of
    ``pairs`` ``(M, 2)`` (consecutive pairs of tracks: :func:`true_consecutive_pairs`)."""
    order, lo, n_next = _continuations(pairs[:, 0], pairs[:, 1])
    which, k = _expand(np.arange(len(pairs)), n_next)
    following = order[lo[which] + k]
    return np.stack([pairs[which, 0], pairs[which, 1], pairs[following, 1]], axis=1)


def _continuations(first: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, ...]:
    """For pairs ``(first, second)`` ``(M,)``: the order sorting them by ``first``, and for each
    pair where the pairs starting at its ``second`` begin in that order and how many there are
    (``order[lo[i] : lo[i] + n[i]]``)."""
    order = np.argsort(first, kind="stable")
    starts = first[order]
    lo = np.searchsorted(starts, second, side="left")
    return order, lo, np.searchsorted(starts, second, side="right") - lo


def _expand(rows: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each of ``rows`` repeated ``counts`` times, with its repeat number ``0..count-1``."""
    which = np.repeat(rows, counts)
    return which, np.arange(len(which)) - np.repeat(np.cumsum(counts) - counts, counts)


def _chunks(counts: np.ndarray) -> list[np.ndarray]:
    """Row indices of ``counts`` split into runs of about :data:`CHUNK_CANDIDATES` in total."""
    ends = np.cumsum(counts)
    total = int(ends[-1]) if len(ends) else 0
    bounds = np.searchsorted(ends, np.arange(CHUNK_CANDIDATES, total, CHUNK_CANDIDATES))
    return np.split(np.arange(len(counts)), np.unique(bounds))


#: Per event, what :func:`fit_module_map` learns from: ``(source module (M,), target module
#: (M,), pair features (M, 4))``, optionally followed by ``(triplet modules (T, 3), triplet
#: features (T, 2))`` (:func:`event_doublets`).
EventDoublets = tuple[np.ndarray, ...]


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
        typical = _typical_widths(stats, "module pair", "--floor")
        low, high = low - floors * typical, high + floors * typical
    found = triplets.result()
    module_triplets = None
    if found is not None:
        low_t, high_t = found.low, found.high
        if triplet_floor > 0:
            typical = _typical_widths(found, "module triplet", "--triplet-floor")
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


def _typical_widths(stats: _KeyStatistics, what: str, option: str) -> np.ndarray:
    """Median [min, max] width per feature of the rows seen >= :data:`BUSY_PAIR_DOUBLETS`
    times (the floors' unit)."""
    busy = stats.count >= BUSY_PAIR_DOUBLETS
    if not busy.any():
        raise InputError(
            f"module map: no {what} has {BUSY_PAIR_DOUBLETS} doublets to set the window floor "
            f"from (fit more events or drop {option})"
        )
    return np.median((stats.high - stats.low)[busy], axis=0)


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


def event_doublets(
    module: np.ndarray, xyz: np.ndarray, true_pairs: np.ndarray, *, triplets: bool = False
) -> EventDoublets:
    """The module pairs and window features of an event's true doublets (and triplets).

    Args:
        module: Module of each hit ``(N,)`` (:func:`module_keys`).
        xyz: Hit positions ``(N, 3)`` [mm].
        true_pairs: ``(earlier, later)`` hit pairs ``(M, 2)``, consecutive along tracks.
        triplets: Also the module triplets of consecutive pairs and their
            :data:`TRIPLET_FEATURES`.
    """
    first, second = true_pairs[:, 0], true_pairs[:, 1]
    found = (module[first], module[second], pair_features(xyz, first, second))
    if not triplets:
        return found
    hits = consecutive_triplets(true_pairs)
    return (*found, module[hits], triplet_features(xyz, hits))


def module_map_edges(
    module_map: ModuleMap, module: np.ndarray, xyz: np.ndarray, *, where: str = "event"
) -> tuple[np.ndarray, np.ndarray]:
    """The hit pairs of an event that the map accepts, as ``(earlier, later)`` index arrays.

    Every recorded module pair whose two modules hold hits in the event gives its candidates
    (every hit of the first module with every hit of the second); those inside the pair's
    windows are kept, in the map's pair order. Vectorised over chunks of about
    :data:`CHUNK_CANDIDATES` candidates (memory stays small and is reused), each window
    applied in turn to the candidates the previous ones kept (dphi first: the narrowest).

    Raises:
        InputError: The event would give more than :data:`MAX_CANDIDATES` candidates.
    """
    empty = np.zeros(0, dtype=np.int64)
    order = np.argsort(module, kind="stable")
    present, start, n_hits = np.unique(module[order], return_index=True, return_counts=True)
    if len(present) == 0 or len(module_map) == 0:
        return empty, empty

    def lookup(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pos = np.minimum(np.searchsorted(present, keys), len(present) - 1)
        return pos, present[pos] == keys

    pos_a, found_a = lookup(module_map.source)
    pos_b, found_b = lookup(module_map.target)
    pairs = np.flatnonzero(found_a & found_b)
    size_a, size_b = n_hits[pos_a[pairs]], n_hits[pos_b[pairs]]
    n_candidates = size_a * size_b
    total = int(n_candidates.sum())
    if total > MAX_CANDIDATES:
        raise InputError(
            f"{where}: the module map gives {total:,} candidate pairs (more than "
            f"{MAX_CANDIDATES:,}); is it fitted to this detector?"
        )
    hits = cylindrical(xyz)
    kept_first, kept_second = [], []
    for chunk in _chunks(n_candidates):
        which, k = _expand(chunk, n_candidates[chunk])
        first = order[start[pos_a[pairs[which]]] + k // size_b[which]]
        second = order[start[pos_b[pairs[which]]] + k % size_b[which]]
        first, second = _inside_windows(module_map, pairs[which], first, second, hits)
        kept_first.append(first)
        kept_second.append(second)
    if not kept_first:
        return empty, empty
    first, second = np.concatenate(kept_first), np.concatenate(kept_second)
    if module_map.triplets is not None:
        in_triplet = _in_accepted_triplets(module_map.triplets, module, xyz, first, second)
        first, second = first[in_triplet], second[in_triplet]
    return first, second


def _in_accepted_triplets(
    triplets: ModuleTriplets,
    module: np.ndarray,
    xyz: np.ndarray,
    first: np.ndarray,
    second: np.ndarray,
) -> np.ndarray:
    """Which doublets ``(first, second)`` ``(E,)`` belong to a triplet the map accepts: two
    doublets ``(a, b)``, ``(b, c)`` whose modules are a recorded triplet, inside its
    windows. ``(E,)`` bool. In chunks of about :data:`CHUNK_CANDIDATES` doublet pairs."""
    keep = np.zeros(len(first), dtype=bool)
    if len(first) == 0 or len(triplets.count) == 0:
        return keep
    # Dense module numbers (those of no recorded triplet: -1) make a triplet one int64 key.
    known = np.unique(triplets.modules)
    n_known = len(known)
    pos = np.minimum(np.searchsorted(known, module), n_known - 1)
    dense = np.where(known[pos] == module, pos, -1)
    table_dense = np.searchsorted(known, triplets.modules)
    table_keys = (table_dense[:, 0] * n_known + table_dense[:, 1]) * n_known + table_dense[:, 2]
    features = pair_features(xyz, first, second)
    # Each doublet e1 = (a, b) with every doublet e2 = (b, c) that starts where it ends.
    order, lo, n_next = _continuations(first, second)
    for chunk in _chunks(n_next):
        e1, k = _expand(chunk, n_next[chunk])
        e2 = order[lo[e1] + k]
        a, b, c = dense[first[e1]], dense[second[e1]], dense[second[e2]]
        known_modules = (a >= 0) & (b >= 0) & (c >= 0)
        e1, e2 = e1[known_modules], e2[known_modules]
        key = (a[known_modules] * n_known + b[known_modules]) * n_known + c[known_modules]
        row = np.minimum(np.searchsorted(table_keys, key), len(table_keys) - 1)
        recorded = table_keys[row] == key
        e1, e2, row = e1[recorded], e2[recorded], row[recorded]
        values = _triplet_features(features[e1], features[e2])
        inside = np.all((values >= triplets.low[row]) & (values <= triplets.high[row]), axis=1)
        keep[e1[inside]] = True
        keep[e2[inside]] = True
    return keep


def _inside_windows(
    module_map: ModuleMap,
    pair: np.ndarray,
    first: np.ndarray,
    second: np.ndarray,
    hits: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """The candidates ``(first, second)`` ``(M,)`` of map pairs ``pair`` ``(M,)`` inside every
    window: :func:`pair_features`' values, each computed only for the candidates the windows
    before it kept. ``hits`` is :func:`~partgnn.data.graph_features.cylindrical` of all hits."""
    r, phi, z, eta = hits
    low, high = module_map.low, module_map.high

    def keep(values: np.ndarray, column: int) -> np.ndarray:
        return (values >= low[pair, column]) & (values <= high[pair, column])

    dphi = wrap_phi(phi[second] - phi[first])
    inside = keep(dphi, 1)
    pair, first, second, dphi = pair[inside], first[inside], second[inside], dphi[inside]
    dr = slope_dr(r[second] - r[first])
    z0 = z[first] - r[first] * (z[second] - z[first]) / dr
    inside = keep(z0, 0) & keep(dphi / dr, 2) & keep(eta[second] - eta[first], 3)
    return first[inside], second[inside]
