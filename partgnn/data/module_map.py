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
from partgnn.errors import InputError

#: The quantities a module pair's windows bound, in the order of :attr:`ModuleMap.low`.
WINDOW_FEATURES: tuple[str, ...] = ("z0", "dphi", "phi_slope", "deta")

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
    """

    source: np.ndarray
    target: np.ndarray
    low: np.ndarray
    high: np.ndarray
    count: np.ndarray
    settings: dict

    def save(self, path: str | os.PathLike[str]) -> None:
        """Writes the map as an ``.npz`` file, atomically."""
        with atomic_output(path) as tmp, open(tmp, "wb") as handle:
            np.savez_compressed(
                handle, source=self.source, target=self.target, low=self.low, high=self.high,
                count=self.count, settings=np.array(json.dumps({"format": MAP_FORMAT,
                                                                **self.settings})),
            )  # fmt: skip

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ModuleMap:
        """Reads a map written by :meth:`save`.

        Raises:
            InputError: Missing, not a module map, or its arrays disagree.
        """
        path = Path(path)
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
        return cls(source, target, low, high, count, settings)

    def __len__(self) -> int:
        return len(self.source)


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


def fit_module_map(
    doublets: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]],
    *,
    window: str = "minmax",
    width: float = 0.0,
    settings: dict | None = None,
    chunk_doublets: int = 2_000_000,
    floor: float | Sequence[float] = 0.0,
) -> ModuleMap:
    """Fits a module map to training doublets, streaming: the doublets of a few events at a
    time are reduced to per-pair statistics (count, min, max, sum, sum of squares) and merged
    into the running ones, so memory grows with the module pairs, not the events.

    Args:
        doublets: Per event ``(source module, target module, features)``: ``(M,)``, ``(M,)``
            and ``(M, 4)`` (:func:`event_doublets`).
        window: ``"minmax"`` (``[min, max]`` widened by ``width`` times its width each side)
            or ``"rms"`` (``mean +- width * rms``).
        width: See ``window``.
        settings: Recorded with the map.
        chunk_doublets: Doublets gathered before each reduction.
        floor: Widen every window by ``floor`` times the median width (per feature) of the
            ``minmax`` windows of well-sampled pairs (at least :data:`BUSY_PAIR_DOUBLETS`
            doublets) on each side: a pair seen a few times has a window of nearly a point.
            One value for every feature, or one per feature (:data:`WINDOW_FEATURES` order).

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
    floors = np.broadcast_to(floors, (len(WINDOW_FEATURES),))
    running: _PairStatistics | None = None
    pending: list[_PairStatistics] = []
    n_pending = 0
    for source, target, features in doublets:
        if len(source) == 0:
            continue
        pending.append(_PairStatistics.of_doublets(source, target, features))
        n_pending += len(source)
        if n_pending >= chunk_doublets:
            running = _PairStatistics.merged([running, *pending] if running else pending)
            pending, n_pending = [], 0
    if pending:
        running = _PairStatistics.merged([running, *pending] if running else pending)
    if running is None:
        raise InputError("module map: the training events have no true doublets")
    stats = running
    if window == "minmax":
        spread = (stats.high - stats.low) * width
        low, high = stats.low - spread, stats.high + spread
    else:
        mean = stats.total / stats.count[:, None]
        rms = np.sqrt(np.maximum(stats.squares / stats.count[:, None] - mean**2, 0.0))
        low, high = mean - width * rms, mean + width * rms
    if floors.any():
        busy = stats.count >= BUSY_PAIR_DOUBLETS
        if not busy.any():
            raise InputError(
                f"module map: no module pair has {BUSY_PAIR_DOUBLETS} doublets to set the "
                "window floor from (fit more events or drop --floor)"
            )
        typical = np.median((stats.high - stats.low)[busy], axis=0)
        low, high = low - floors * typical, high + floors * typical
    recorded = float(floors[0]) if np.ndim(floor) == 0 else floors.tolist()  # as given
    return ModuleMap(
        stats.source, stats.target, low, high, stats.count,
        {"window": window, "width": width, "floor": recorded, **(settings or {})},
    )  # fmt: skip


@dataclass(frozen=True)
class _PairStatistics:
    """Per module pair (sorted by source, then target): doublet count and, per window
    feature, min, max, sum and sum of squares."""

    source: np.ndarray
    target: np.ndarray
    count: np.ndarray
    low: np.ndarray
    high: np.ndarray
    total: np.ndarray
    squares: np.ndarray

    @classmethod
    def of_doublets(
        cls, source: np.ndarray, target: np.ndarray, features: np.ndarray
    ) -> _PairStatistics:
        """Statistics of single doublets (one row each), to be merged."""
        ones = np.ones(len(source), dtype=np.int64)
        return cls(source, target, ones, features, features, features, features**2)

    @classmethod
    def merged(cls, parts: list[_PairStatistics]) -> _PairStatistics:
        """The statistics of all ``parts`` together, one row per module pair."""
        source = np.concatenate([p.source for p in parts])
        target = np.concatenate([p.target for p in parts])
        order = np.lexsort((target, source))
        source, target = source[order], target[order]
        new = np.ones(len(order), dtype=bool)
        new[1:] = (source[1:] != source[:-1]) | (target[1:] != target[:-1])
        starts = np.flatnonzero(new)

        def reduce(name: str, ufunc: np.ufunc) -> np.ndarray:
            values = np.concatenate([getattr(p, name) for p in parts])[order]
            return ufunc.reduceat(values, starts, axis=0)

        return cls(
            source[starts], target[starts], reduce("count", np.add), reduce("low", np.minimum),
            reduce("high", np.maximum), reduce("total", np.add), reduce("squares", np.add),
        )  # fmt: skip


def event_doublets(
    module: np.ndarray, xyz: np.ndarray, true_pairs: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The module pairs and window features of an event's true doublets.

    Args:
        module: Module of each hit ``(N,)`` (:func:`module_keys`).
        xyz: Hit positions ``(N, 3)`` [mm].
        true_pairs: ``(earlier, later)`` hit pairs ``(M, 2)``.
    """
    first, second = true_pairs[:, 0], true_pairs[:, 1]
    return module[first], module[second], pair_features(xyz, first, second)


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
    ends = np.cumsum(n_candidates)
    total = int(ends[-1]) if len(ends) else 0
    if total > MAX_CANDIDATES:
        raise InputError(
            f"{where}: the module map gives {total:,} candidate pairs (more than "
            f"{MAX_CANDIDATES:,}); is it fitted to this detector?"
        )
    hits = cylindrical(xyz)
    kept_first, kept_second = [], []
    bounds = np.searchsorted(ends, np.arange(CHUNK_CANDIDATES, total, CHUNK_CANDIDATES))
    for chunk in np.split(np.arange(len(pairs)), np.unique(bounds)):
        counts = n_candidates[chunk]
        which = np.repeat(chunk, counts)
        k = np.arange(len(which)) - np.repeat(np.cumsum(counts) - counts, counts)
        first = order[start[pos_a[pairs[which]]] + k // size_b[which]]
        second = order[start[pos_b[pairs[which]]] + k % size_b[which]]
        first, second = _inside_windows(module_map, pairs[which], first, second, hits)
        kept_first.append(first)
        kept_second.append(second)
    if not kept_first:
        return empty, empty
    return np.concatenate(kept_first), np.concatenate(kept_second)


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
