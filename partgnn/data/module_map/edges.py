"""Building an event's edges by a module map: every hit pair on a recorded module pair, inside
its windows (and, with triplets, a doublet of an accepted triplet), vectorised over chunks of
candidates."""

from __future__ import annotations

import numpy as np

from partgnn.data.graphs.graph_features import cylindrical, slope_dr, wrap_phi
from partgnn.data.module_map.map_file import (
    ModuleMap,
    ModuleTriplets,
    candidate_chunks,
    continuations,
    expand_rows,
    pair_features,
    triplet_changes,
)
from partgnn.errors import InputError

#: Most candidate hit pairs one event may produce (a guard against a map that joins everything).
MAX_CANDIDATES = 200_000_000


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
    for chunk in candidate_chunks(n_candidates):
        which, k = expand_rows(chunk, n_candidates[chunk])
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
    order, lo, n_next = continuations(first, second)
    for chunk in candidate_chunks(n_next):
        e1, k = expand_rows(chunk, n_next[chunk])
        e2 = order[lo[e1] + k]
        a, b, c = dense[first[e1]], dense[second[e1]], dense[second[e2]]
        known_modules = (a >= 0) & (b >= 0) & (c >= 0)
        e1, e2 = e1[known_modules], e2[known_modules]
        key = (a[known_modules] * n_known + b[known_modules]) * n_known + c[known_modules]
        row = np.minimum(np.searchsorted(table_keys, key), len(table_keys) - 1)
        recorded = table_keys[row] == key
        e1, e2, row = e1[recorded], e2[recorded], row[recorded]
        values = triplet_changes(features[e1], features[e2])
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
    before it kept. ``hits`` is :func:`~partgnn.data.graphs.graph_features.cylindrical` of all
    hits."""
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
