"""Tracks matched to truth particles, one row per particle, track and (track, particle) pair
(:class:`TrackMatching`): what :mod:`partgnn.metrics.tracks` counts and per-bin plots
(:mod:`partgnn.metrics.efficiency_tallies`) bin. Vectorised over hits (numpy).

Glossary (as :mod:`partgnn.metrics.tracks`): a *track* is the set of hits that share a label
``>= 0``; a *candidate* track has at least ``min_hits`` hits; a *pair* is a (track, particle)
combination with its shared hit count.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from partgnn.errors import InputError
from partgnn.metrics.track_building import as_numpy

# What ``particle_n_hits`` may be: {particle_id: n_hits}, a pandas Series indexed by particle id
# (e.g. ``particles.set_index("particle_id")["nhits"]``), or two arrays ``(particle_ids, n_hits)``.
ParticleHitCounts = Mapping[int, int] | pd.Series | tuple[Any, Any]


@dataclass(frozen=True)
class TrackMatching:
    """Tracks matched to particles, one row per particle, track and (track, particle) pair:
    what :func:`~partgnn.metrics.tracks.track_metrics` counts, and what per-bin plots need.

    Attributes:
        particle_ids: ``(P,)`` the particles' ids, ascending (noise, 0, first if present).
        particle_of_hit: ``(N,)`` each hit's particle row.
        particle_pt: ``(P,)`` pT [GeV] (0 without ``particle_pt``).
        is_target: ``(P,)`` target particles.
        reconstructed: ``(P,)`` matched by a candidate track (double majority).
        reconstructed_atlas: ``(P,)`` holding > 50 % of a candidate track's hits.
        reconstructed_one_way: ``(P,)`` with > 50 % of their hits in a candidate track.
        track_labels: ``(T,)`` the tracks' labels.
        assigned: ``(A,)`` the hits with a label >= 0.
        track_of_hit: ``(A,)`` each assigned hit's track row.
        n_track_hits: ``(T,)`` hits per track.
        candidate_track: ``(T,)`` tracks of >= ``min_hits`` hits.
        pure_track: ``(T,)`` candidate tracks in which one particle (not noise) holds > 50 %.
        pair_of_hit, pair_track, pair_particle: each assigned hit's pair; each pair's track
            and particle row.
        track_majority, particle_majority, matched, duplicate: per pair (see
            :func:`~partgnn.metrics.tracks.track_metrics`).
    """

    particle_ids: np.ndarray
    particle_of_hit: np.ndarray
    particle_pt: np.ndarray
    is_target: np.ndarray
    reconstructed: np.ndarray
    reconstructed_atlas: np.ndarray
    reconstructed_one_way: np.ndarray
    track_labels: np.ndarray
    assigned: np.ndarray
    track_of_hit: np.ndarray
    n_track_hits: np.ndarray
    candidate_track: np.ndarray
    pure_track: np.ndarray
    pair_of_hit: np.ndarray
    pair_track: np.ndarray
    pair_particle: np.ndarray
    track_majority: np.ndarray
    particle_majority: np.ndarray
    matched: np.ndarray
    duplicate: np.ndarray

    @property
    def impure_track(self) -> np.ndarray:
        """``(T,)`` candidate tracks that no particle holds the majority of."""
        return self.candidate_track & ~self.pure_track


def match_tracks(
    labels: Any,
    particle_id: Any,
    *,
    particle_pt: Any = None,
    pt_min: float = 1.0,
    min_hits: int = 3,
    particle_n_hits: ParticleHitCounts | None = None,
    pt_max: float | None = None,
) -> TrackMatching:
    """Matches tracks to particles (:func:`track_metrics`' definitions and arguments).

    Raises:
        InputError: If the per-hit arrays differ in length or ``min_hits < 1``.
    """
    labels = as_numpy(labels).astype(np.int64, copy=False).ravel()
    particle_id = as_numpy(particle_id).astype(np.int64, copy=False).ravel()
    n = len(labels)
    check_hit_count("particle_id", particle_id, n)
    if min_hits < 1:
        raise InputError(f"track metrics: min_hits must be >= 1 (got {min_hits})")

    # Particles, numbered 0 .. P-1 in the order of their ids (noise, id 0, first if present).
    particle_ids, particle_of_hit = np.unique(particle_id, return_inverse=True)
    n_particle_hits = np.bincount(particle_of_hit, minlength=len(particle_ids))
    if particle_n_hits is not None:
        n_particle_hits = np.maximum(
            n_particle_hits, hit_counts_of(particle_ids, particle_n_hits, n_particle_hits)
        )
    is_noise = particle_ids == 0

    is_target = ~is_noise & (n_particle_hits >= min_hits)
    if particle_pt is not None:
        particle_pt = as_numpy(particle_pt).astype(np.float64, copy=False).ravel()
        check_hit_count("particle_pt", particle_pt, n)
        pt = np.zeros(len(particle_ids))
        pt[particle_of_hit] = particle_pt  # one value per particle: any of its hits will do
        is_target &= pt > pt_min
        if pt_max is not None:
            is_target &= pt <= pt_max

    # Tracks, numbered 0 .. T-1, and their (track, particle) pairs with shared hit counts.
    assigned = np.flatnonzero(labels >= 0)
    track_labels, track_of_hit = np.unique(labels[assigned], return_inverse=True)
    n_track_hits = np.bincount(track_of_hit, minlength=len(track_labels))
    pair_key = track_of_hit * len(particle_ids) + particle_of_hit[assigned]
    keys, pair_of_hit, n_shared = np.unique(pair_key, return_inverse=True, return_counts=True)
    pair_track, pair_particle = np.divmod(keys, max(len(particle_ids), 1))

    # "More than 50%" in integers: 2 * shared > total, exact at the boundary.
    track_majority = (2 * n_shared > n_track_hits[pair_track]) & ~is_noise[pair_particle]
    particle_majority = 2 * n_shared > n_particle_hits[pair_particle]
    candidate = n_track_hits[pair_track] >= min_hits

    matched = candidate & track_majority & particle_majority
    reconstructed = np.zeros(len(particle_ids), dtype=bool)
    reconstructed[pair_particle[matched]] = True
    duplicate = candidate & track_majority & ~particle_majority & reconstructed[pair_particle]
    reconstructed_atlas = np.zeros(len(particle_ids), dtype=bool)
    reconstructed_atlas[pair_particle[candidate & track_majority]] = True
    reconstructed_one_way = np.zeros(len(particle_ids), dtype=bool)
    reconstructed_one_way[
        pair_particle[candidate & particle_majority & ~is_noise[pair_particle]]
    ] = True

    pure_track = np.zeros(len(track_labels), dtype=bool)
    pure_track[pair_track[candidate & track_majority]] = True
    return TrackMatching(
        particle_ids=particle_ids, particle_of_hit=particle_of_hit,
        particle_pt=pt if particle_pt is not None else np.zeros(len(particle_ids)),
        is_target=is_target, reconstructed=reconstructed,
        reconstructed_atlas=reconstructed_atlas, reconstructed_one_way=reconstructed_one_way,
        track_labels=track_labels, assigned=assigned, track_of_hit=track_of_hit,
        n_track_hits=n_track_hits, candidate_track=n_track_hits >= min_hits,
        pure_track=pure_track, pair_of_hit=pair_of_hit, pair_track=pair_track,
        pair_particle=pair_particle, track_majority=track_majority,
        particle_majority=particle_majority, matched=matched, duplicate=duplicate,
    )  # fmt: skip


def hit_counts_of(
    particle_ids: np.ndarray, particle_n_hits: ParticleHitCounts, default: np.ndarray
) -> np.ndarray:
    """``particle_n_hits`` looked up for each of ``particle_ids`` (``default`` where absent)."""
    if isinstance(particle_n_hits, pd.Series):
        ids, counts = particle_n_hits.index.to_numpy(), particle_n_hits.to_numpy()
    elif isinstance(particle_n_hits, Mapping):
        ids = np.fromiter(particle_n_hits.keys(), dtype=np.int64, count=len(particle_n_hits))
        counts = np.fromiter(particle_n_hits.values(), dtype=np.int64, count=len(particle_n_hits))
    elif isinstance(particle_n_hits, tuple) and len(particle_n_hits) == 2:
        ids, counts = (as_numpy(a).ravel() for a in particle_n_hits)
    else:
        raise InputError(
            "track metrics: particle_n_hits must be a mapping, a pandas Series or a pair of "
            f"arrays (got {type(particle_n_hits).__name__})"
        )
    ids, counts = ids.astype(np.int64, copy=False), counts.astype(np.int64, copy=False)
    if ids.shape != counts.shape:
        raise InputError(
            f"track metrics: particle_n_hits has {len(ids)} ids but {len(counts)} counts"
        )
    if len(ids) == 0:
        return default
    order = np.argsort(ids, kind="stable")
    pos = np.minimum(np.searchsorted(ids[order], particle_ids), len(ids) - 1)
    found = ids[order][pos] == particle_ids
    return np.where(found, counts[order][pos], default)


def check_hit_count(name: str, array: np.ndarray, n: int) -> None:
    if len(array) != n:
        raise InputError(f"track metrics: {name} has {len(array)} values for {n} hits")
