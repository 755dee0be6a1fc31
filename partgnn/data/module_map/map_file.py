"""Module-map graph construction: the module pairs real tracks cross, learned from truth.

The method of L2IT's module map (used in GNN4ITk): from the truth of training events, record
every pair of detector modules that two consecutive hits of one particle lie on (a *doublet*
of modules), with windows on the quantities graph construction cuts on, per pair; a new
event's graph then joins two hits only when their modules are a recorded pair and the hit pair
falls in that pair's windows. A module is ``(layer index, module_id)`` of the events file:
TrackML events and simulated ones carry the TrackML detector's module ids
(:mod:`~partgnn.data.detector.detector_modules`), so a map fitted on simulation applies to real
events.

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

import functools
import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from partgnn.data.files.output_files import atomic_output
from partgnn.data.files.zip_records import check_zip_records
from partgnn.data.graphs.graph_features import cylindrical, slope_dr, wrap_phi
from partgnn.errors import InputError

#: The quantities a module pair's windows bound, in the order of :attr:`ModuleMap.low`.
WINDOW_FEATURES: tuple[str, ...] = ("z0", "dphi", "phi_slope", "deta")

#: What a module triplet's windows bound: how much z0 [mm] and phi slope [rad/mm] change from
#: its first doublet to its second (a track bends little between them).
TRIPLET_FEATURES: tuple[str, ...] = ("dz0", "dphi_slope")

#: Format tag of a module-map file.
MAP_FORMAT = "partgnn-module-map"

#: Candidates processed together by :func:`~partgnn.data.module_map.edges.module_map_edges`.
CHUNK_CANDIDATES = 1 << 21


def check_map_file(path: str | os.PathLike[str]) -> Path:
    """Checks, cheaply and before any work, that ``path`` can be a module map: a file, and a
    whole zip archive (a truncated copy has lost the archive's directory at its end).

    Raises:
        InputError: Missing, a folder, or not a whole zip archive (one line naming the file).
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: module map not found")
    if not path.is_file():
        raise InputError(f"{path}: is a folder, not a module map (.npz)")
    if not zipfile.is_zipfile(path):
        raise InputError(
            f"{path}: not a module-map file (not a whole .npz archive: truncated, or another "
            "kind of file)"
        )
    return path


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
        path = check_map_file(path)
        check_zip_records(path)
        try:
            with np.load(path, allow_pickle=False) as arrays:
                fields = {name: arrays[name] for name in arrays.files}
        except FileNotFoundError:
            raise InputError(f"{path}: file not found") from None
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
            raise InputError(f"{path}: not a module-map file ({err})") from None
        try:
            settings = json.loads(str(fields.pop("settings")))
            source, target = fields["source"], fields["target"]
            # Windows stored in float32 (rounded outward) are compared in float64, exactly.
            low, high = _float64(fields["low"]), _float64(fields["high"])
            count = fields["count"]
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
                    fields["triplet_modules"], _float64(fields["triplet_low"]),
                    _float64(fields["triplet_high"]), fields["triplet_count"],
                )  # fmt: skip
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

    def rounded_outward(self) -> ModuleMap:
        """The map with every window bound stored in float32, rounded outward (a lower bound
        down, an upper bound up): half the bytes, every window the same or wider by at most
        one float32 step (6e-8 of its value), so every edge of the float64 map is kept; and
        last-bit differences of the float64 arithmetic that fitted it (another CPU's) vanish
        but where a bound lies on a float32 rounding boundary."""
        triplets = self.triplets
        if triplets is not None:
            triplets = ModuleTriplets(
                triplets.modules, _round_down(triplets.low), _round_up(triplets.high),
                triplets.count,
            )  # fmt: skip
        settings = {**self.settings, "window_precision": "float32"}
        return ModuleMap(self.source, self.target, _round_down(self.low), _round_up(self.high),
                         self.count, settings, triplets)  # fmt: skip

    def unseen_pair_share(self) -> float:
        """The share of a new event's true doublets expected on module pairs the map never
        recorded: the Good-Turing estimate, pairs seen once over all doublets seen (0 for an
        empty map)."""
        total = int(self.count.sum())
        return int((self.count == 1).sum()) / total if total else 0.0

    @functools.cached_property
    def modules(self) -> np.ndarray:
        """The modules of the map's pairs, sorted ``(M,)`` (found once per map)."""
        return np.union1d(self.source, self.target)

    def unmapped_hits(self, module: np.ndarray) -> int:
        """How many hits lie on modules in none of the map's pairs (their edges cannot be
        built).

        Args:
            module: Module of each hit ``(N,)`` (:func:`module_keys`).
        """
        return int((~np.isin(module, self.modules)).sum())


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


def _float64(values: np.ndarray) -> np.ndarray:
    """Float windows as float64 (float32 ones exactly); anything else as it is (the shape and
    length checks that follow name a bad file)."""
    return values.astype(np.float64) if values.dtype == np.float32 else values


def _round_down(values: np.ndarray) -> np.ndarray:
    """``values`` as float32, each the largest float32 <= it."""
    rounded = values.astype(np.float32)
    above = rounded.astype(values.dtype) > values
    rounded[above] = np.nextafter(rounded[above], np.float32(-np.inf))
    return rounded


def _round_up(values: np.ndarray) -> np.ndarray:
    """``values`` as float32, each the smallest float32 >= it."""
    return -_round_down(-values)


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
    return triplet_changes(first, second)


def triplet_changes(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """:data:`TRIPLET_FEATURES` from the :func:`pair_features` of the two doublets."""
    return np.stack([second[:, 0] - first[:, 0], second[:, 2] - first[:, 2]], axis=1)


def consecutive_triplets(pairs: np.ndarray) -> np.ndarray:
    """Hit triplets ``(a, b, c)`` ``(T, 3)`` made of two pairs ``(a, b)`` and ``(b, c)`` of
    ``pairs`` ``(M, 2)`` (consecutive pairs of tracks:
    :func:`~partgnn.data.graphs.graph_builder.true_consecutive_pairs`)."""
    order, lo, n_next = continuations(pairs[:, 0], pairs[:, 1])
    which, k = expand_rows(np.arange(len(pairs)), n_next)
    following = order[lo[which] + k]
    return np.stack([pairs[which, 0], pairs[which, 1], pairs[following, 1]], axis=1)


def continuations(first: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, ...]:
    """For pairs ``(first, second)`` ``(M,)``: the order sorting them by ``first``, and for each
    pair where the pairs starting at its ``second`` begin in that order and how many there are
    (``order[lo[i] : lo[i] + n[i]]``)."""
    order = np.argsort(first, kind="stable")
    starts = first[order]
    lo = np.searchsorted(starts, second, side="left")
    return order, lo, np.searchsorted(starts, second, side="right") - lo


def expand_rows(rows: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each of ``rows`` repeated ``counts`` times, with its repeat number ``0..count-1``."""
    which = np.repeat(rows, counts)
    return which, np.arange(len(which)) - np.repeat(np.cumsum(counts) - counts, counts)


def candidate_chunks(counts: np.ndarray) -> list[np.ndarray]:
    """Row indices of ``counts`` split into runs of about :data:`CHUNK_CANDIDATES` in total."""
    ends = np.cumsum(counts)
    total = int(ends[-1]) if len(ends) else 0
    bounds = np.searchsorted(ends, np.arange(CHUNK_CANDIDATES, total, CHUNK_CANDIDATES))
    return np.split(np.arange(len(counts)), np.unique(bounds))


#: Per event, what :func:`~partgnn.data.module_map.fit.fit_module_map` learns from:
#: ``(source module (M,), target module (M,), pair features (M, 4))``, optionally followed by
#: ``(triplet modules (T, 3), triplet features (T, 2))`` (:func:`event_doublets`).
EventDoublets = tuple[np.ndarray, ...]


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
