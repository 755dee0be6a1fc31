"""Track metrics: the tracks of :mod:`partgnn.metrics.track_building` matched to the truth
particles (double-majority efficiency, fake and duplicate rates, ATLAS and one-way matching, the
TrackML score). Vectorised over hits (numpy): an event of 1e5 hits takes a few tens of
milliseconds.

Glossary: a *track* is the set of hits that share a label ``>= 0``; a *candidate* track has at
least ``min_hits`` hits; a *target* particle is a non-noise particle with ``pT > pt_min`` and at
least ``min_hits`` hits; a *pair* is a (track, particle) combination with its shared hit count.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any

import numpy as np

from partgnn import json_files
from partgnn.errors import InputError
from partgnn.metrics.track_building import as_numpy
from partgnn.metrics.track_matching import (
    ParticleHitCounts,
    TrackMatching,
    check_hit_count,
    match_tracks,
)

# One NaN object, so that metrics with the same undefined rates compare equal.
_NAN = json_files.NAN


@dataclass(frozen=True)
class TrackMetrics:
    """Track reconstruction quality of one event (or several, see :meth:`combine`).

    Definitions (see :func:`track_metrics`): a candidate track *matches* particle p (double
    majority) when more than 50% of the track's hits belong to p and more than 50% of p's hits
    are in the track; a track matches at most one particle and a particle at most one track.

    Attributes:
        n_target_particles: Target particles (non-noise, ``pT > pt_min``, ``>= min_hits`` hits).
        n_reconstructed_targets: Target particles matched by a candidate track.
        efficiency: ``n_reconstructed_targets / n_target_particles`` (NaN without targets).
        n_tracks: Candidate tracks (``>= min_hits`` hits).
        n_matched_tracks: Candidate tracks that match a particle (any particle, target or not).
        n_fake_tracks: ``n_tracks - n_matched_tracks``: candidate tracks with no double-majority
            match. This includes the duplicates below.
        fake_rate: ``n_fake_tracks / n_tracks`` (NaN without candidate tracks).
        n_duplicate_tracks: Candidate tracks that match no particle but whose hits are more than
            50% from a particle that another track matches: extra pieces of a particle that is
            already reconstructed.
        duplicate_rate: ``n_duplicate_tracks / (n_matched_tracks + n_duplicate_tracks)``: the
            fraction of the tracks assigned to reconstructed particles that are extras (NaN
            when there are none).
        trackml_score: The TrackML score (see :func:`track_metrics`), or ``None`` without hit
            weights; for combined events, the mean over events.
        trackml_score_max: The highest TrackML score these hits allow: the summed weight of
            the graph's hits (1 for a whole event; less for a subsampled one, a pT cut or a
            region, whose score is not normalised to it); ``None`` without hit weights.
        n_impure_tracks: Candidate tracks in which no particle holds more than 50% of the hits
            (the "fake" of the track-purity convention; a pure fragment of a particle, which
            ``n_fake_tracks`` counts, is not impure).
        impure_rate: ``n_impure_tracks / n_tracks`` (NaN without candidate tracks).
        n_spanning_targets: Target particles whose hits lie in more than one sector (only
            counted when the hits' sectors are given; 0 otherwise).
        n_reconstructed_spanning: Of those, the ones matched by a candidate track.
        spanning_efficiency: ``n_reconstructed_spanning / n_spanning_targets`` (NaN without).
        contained_efficiency: The efficiency of the other target particles, those inside one
            sector (NaN without sectors or without such particles).
        split_by_sector: Whether the hits' sectors were given (the spanning counts are 0 and
            the split efficiencies NaN otherwise).
        n_reconstructed_atlas: Target particles that hold more than 50 % of the hits of a
            candidate track (the ATLAS matching of acorn's evaluation; its fake rate is
            ``impure_rate``).
        efficiency_atlas: ``n_reconstructed_atlas / n_target_particles``.
        n_reconstructed_one_way: Target particles more than 50 % of whose hits are in one
            candidate track, whatever else the track holds (acorn's one-way matching; its fake
            rate is ``impure_rate`` too). Two-way matching is double majority.
        efficiency_one_way: ``n_reconstructed_one_way / n_target_particles``.
    """

    n_target_particles: int
    n_reconstructed_targets: int
    efficiency: float
    n_tracks: int
    n_matched_tracks: int
    n_fake_tracks: int
    fake_rate: float
    n_duplicate_tracks: int
    duplicate_rate: float
    trackml_score: float | None = None
    trackml_score_max: float | None = None
    n_impure_tracks: int = 0
    impure_rate: float = _NAN
    n_spanning_targets: int = 0
    n_reconstructed_spanning: int = 0
    spanning_efficiency: float = _NAN
    contained_efficiency: float = _NAN
    split_by_sector: bool = False
    n_reconstructed_atlas: int = 0
    efficiency_atlas: float = _NAN
    n_reconstructed_one_way: int = 0
    efficiency_one_way: float = _NAN

    def to_dict(self) -> dict[str, int | float | None]:
        """The fields as a plain dict (for JSON, HDF5 attributes and printing)."""
        return asdict(self)

    @classmethod
    def of_json(cls, content: dict[str, Any], where: str) -> TrackMetrics:
        """The metrics of an evaluation's ``track`` object (:meth:`to_dict` written as JSON:
        undefined rates ``null``). Files of older partgnn lack the fields with defaults.

        Raises:
            InputError: A count absent (one without a default) or not a whole number, or a
                rate not a number (one line naming ``where`` and the field).
        """
        kinds = {f.name: f for f in fields(cls)}
        required = [n for n, f in kinds.items() if f.default is MISSING]
        whole = [n for n in kinds if n.startswith("n_")]
        scores = ("trackml_score", "trackml_score_max")
        rates = [n for n in kinds if n not in whole and n not in scores and n != "split_by_sector"]
        found: dict[str, Any] = {
            **json_files.counts(content, [n for n in whole if n in required], where, required=True),
            **json_files.counts(content, [n for n in whole if n not in required], where),
            **json_files.numbers(content, rates, where),
        }
        for name in scores:  # None: the events had no hit weights
            value = content.get(name)
            found[name] = (
                None if value is None else json_files.numbers(content, [name], where)[name]
            )
        split = content.get("split_by_sector", False)
        if not isinstance(split, bool):
            raise InputError(f"{where}: split_by_sector must be true or false (got {split!r:.40})")
        return cls(**found, split_by_sector=split)

    @classmethod
    def from_counts(
        cls,
        *,
        n_target_particles: int,
        n_reconstructed_targets: int,
        n_tracks: int,
        n_matched_tracks: int,
        n_duplicate_tracks: int,
        trackml_score: float | None = None,
        trackml_score_max: float | None = None,
        n_impure_tracks: int = 0,
        n_spanning_targets: int = 0,
        n_reconstructed_spanning: int = 0,
        sectors_known: bool = False,
        n_reconstructed_atlas: int = 0,
        n_reconstructed_one_way: int = 0,
    ) -> TrackMetrics:
        """Builds the metrics from the counts; the rates follow their definitions above.

        ``sectors_known`` says whether the spanning counts were computed (else the split
        efficiencies are NaN).
        """
        n_fake = n_tracks - n_matched_tracks
        spanning, contained = _NAN, _NAN
        if sectors_known:
            spanning = _ratio(n_reconstructed_spanning, n_spanning_targets)
            contained = _ratio(
                n_reconstructed_targets - n_reconstructed_spanning,
                n_target_particles - n_spanning_targets,
            )
        return cls(
            n_target_particles=n_target_particles,
            n_reconstructed_targets=n_reconstructed_targets,
            efficiency=_ratio(n_reconstructed_targets, n_target_particles),
            n_tracks=n_tracks,
            n_matched_tracks=n_matched_tracks,
            n_fake_tracks=n_fake,
            fake_rate=_ratio(n_fake, n_tracks),
            n_duplicate_tracks=n_duplicate_tracks,
            duplicate_rate=_ratio(n_duplicate_tracks, n_matched_tracks + n_duplicate_tracks),
            trackml_score=trackml_score,
            trackml_score_max=trackml_score_max,
            n_impure_tracks=n_impure_tracks,
            impure_rate=_ratio(n_impure_tracks, n_tracks),
            n_spanning_targets=n_spanning_targets,
            n_reconstructed_spanning=n_reconstructed_spanning,
            spanning_efficiency=spanning,
            contained_efficiency=contained,
            split_by_sector=sectors_known,
            n_reconstructed_atlas=n_reconstructed_atlas,
            efficiency_atlas=_ratio(n_reconstructed_atlas, n_target_particles),
            n_reconstructed_one_way=n_reconstructed_one_way,
            efficiency_one_way=_ratio(n_reconstructed_one_way, n_target_particles),
        )

    @classmethod
    def combine(cls, metrics: Iterable[TrackMetrics]) -> TrackMetrics:
        """Metrics of several events: counts summed, rates recomputed from the sums.

        The TrackML score is the mean of the events' scores (as on Kaggle), or ``None`` if any
        event has none.
        """
        metrics = list(metrics)
        scores = [m.trackml_score for m in metrics]
        has_scores = bool(metrics) and all(s is not None for s in scores)
        maxima = [m.trackml_score_max for m in metrics]
        return cls.from_counts(
            n_target_particles=sum(m.n_target_particles for m in metrics),
            n_reconstructed_targets=sum(m.n_reconstructed_targets for m in metrics),
            n_tracks=sum(m.n_tracks for m in metrics),
            n_matched_tracks=sum(m.n_matched_tracks for m in metrics),
            n_duplicate_tracks=sum(m.n_duplicate_tracks for m in metrics),
            trackml_score=float(np.mean(scores)) if has_scores else None,
            trackml_score_max=(
                float(np.mean(maxima)) if has_scores and None not in maxima else None
            ),
            n_impure_tracks=sum(m.n_impure_tracks for m in metrics),
            n_spanning_targets=sum(m.n_spanning_targets for m in metrics),
            n_reconstructed_spanning=sum(m.n_reconstructed_spanning for m in metrics),
            sectors_known=bool(metrics) and all(m.split_by_sector for m in metrics),
            n_reconstructed_atlas=sum(m.n_reconstructed_atlas for m in metrics),
            n_reconstructed_one_way=sum(m.n_reconstructed_one_way for m in metrics),
        )


def track_metrics(
    labels: Any,
    particle_id: Any,
    *,
    particle_pt: Any = None,
    hit_weight: Any = None,
    pt_min: float = 1.0,
    min_hits: int = 3,
    particle_n_hits: ParticleHitCounts | None = None,
    hit_sector: Any = None,
    pt_max: float | None = None,
) -> TrackMetrics:
    """Matches tracks to truth particles: double-majority efficiency, fakes, duplicates, score.

    Definitions:

    - **Tracks**: the hits with the same label ``>= 0`` form a track; negative labels (-1) are
      unassigned hits and form no track. A *candidate* track has ``>= min_hits`` hits; smaller
      tracks are ignored by every metric except the TrackML score.
    - **Hits of a particle** ``n_p``: its count in ``particle_n_hits`` when given (e.g. its
      rows in the event's truth table: a graph built with a pT cut, or a partition, may hold
      only some of the event's hits), never fewer than the hits present in ``particle_id``;
      otherwise the count in ``particle_id``. Count from the hits the event holds, not from
      the particles table's ``nhits``, which in a subsampled event counts hits that are gone.
    - **Double majority**: a candidate track matches particle p (not noise) when more than 50%
      of the track's hits belong to p and more than 50% of p's hits (``n_p``) are in the track.
    - **Target particles**: non-noise particles present in ``particle_id`` with
      ``pT > pt_min`` (and ``pT <= pt_max`` when given; no pT selection when ``particle_pt``
      is ``None``) and ``n_p >=
      min_hits``. **Efficiency** = matched target particles / target particles.
    - **Fake rate** = candidate tracks with no double-majority match / candidate tracks (over
      all particles, target or not).
    - **Impure rate** = candidate tracks in which no particle (noise excluded) holds more than
      50% of the hits / candidate tracks: the fake rate of the track-purity convention, which
      does not count pure fragments of a particle as fakes (and the fake rate of acorn's ATLAS
      and one-way matching).
    - **ATLAS efficiency** = target particles holding more than 50% of a candidate track's
      hits / target particles; **one-way efficiency** = target particles with more than 50%
      of their hits in one candidate track / target particles (acorn's matching styles at
      fraction 0.5; its two-way style is double majority).
    - **Duplicate rate** = duplicate tracks / (matched tracks + duplicate tracks), where a
      duplicate is a candidate track with no match whose hits are more than 50% from a particle
      that another track matches. (Under double majority a particle is matched by at most one
      track, so the extras are the pure pieces that fail the second majority.)
    - **TrackML score** (only with ``hit_weight``; the Kaggle definition): for each track (any
      size), take the particle with the most hits in it; the track counts when that particle
      holds more than 50% of the track's hits and the track more than 50% of the particle's
      ``n_p`` hits; the score is the sum of ``hit_weight`` over the shared hits of the
      counted tracks. Noise hits never count. Weights are used as given: TrackML truth weights
      sum to 1 over the whole event, so on a graph that holds only part of the event the score
      is out of the weight of the hits present.
    - **Spanning particles** (only with ``hit_sector``): target particles whose hits present
      lie in more than one sector; their efficiency (``spanning_efficiency``) is what a
      partition can cost, the others' (``contained_efficiency``) what it should not.

    Args:
        labels: Track label of each hit, shape ``(N,)``, integer (see
            :func:`~partgnn.metrics.track_building.build_tracks`).
        particle_id: Particle of each hit, shape ``(N,)``, integer; 0 is noise.
        particle_pt: Transverse momentum of each hit's particle [GeV], shape ``(N,)``.
        hit_weight: TrackML truth weight of each hit, shape ``(N,)``.
        pt_min: Target particles have ``pT > pt_min`` [GeV].
        min_hits: Smallest number of hits of a candidate track and of a target particle.
        particle_n_hits: Hits of each particle in the whole event: ``{particle_id: n}``, a pandas
            Series indexed by particle id, or two arrays ``(particle_ids, counts)``.
        hit_sector: Sector (partition part) of each hit, shape ``(N,)``, integer.
        pt_max: Target particles have ``pT <= pt_max`` [GeV] (``None``: no upper bound), e.g.
            ``pt_min=0.5, pt_max=1.0`` for the particles below a 1 GeV target.

    Returns:
        The :class:`TrackMetrics`.

    Raises:
        InputError: If the per-hit arrays differ in length or ``min_hits < 1``.
    """
    m = match_tracks(
        labels, particle_id, particle_pt=particle_pt, pt_min=pt_min, min_hits=min_hits,
        particle_n_hits=particle_n_hits, pt_max=pt_max,
    )  # fmt: skip
    return count_tracks(m, hit_weight=hit_weight, hit_sector=hit_sector)


def count_tracks(
    m: TrackMatching, *, hit_weight: Any = None, hit_sector: Any = None
) -> TrackMetrics:
    """The :class:`TrackMetrics` of a matching (:func:`match_tracks`); ``hit_weight`` and
    ``hit_sector`` as :func:`track_metrics` takes them.

    Raises:
        InputError: If a per-hit array's length is not the matching's.
    """
    n = len(m.particle_of_hit)
    trackml_score = trackml_score_max = None
    if hit_weight is not None:
        hit_weight = as_numpy(hit_weight).astype(np.float64, copy=False).ravel()
        check_hit_count("hit_weight", hit_weight, n)
        pair_weight = np.bincount(
            m.pair_of_hit, weights=hit_weight[m.assigned], minlength=len(m.pair_track)
        )
        # The Kaggle score has no size cut on tracks: a counted pair needs both majorities only.
        trackml_score = float(pair_weight[m.track_majority & m.particle_majority].sum())
        trackml_score_max = float(hit_weight.sum())

    spanning = np.zeros(len(m.particle_ids), dtype=bool)
    if hit_sector is not None:
        hit_sector = as_numpy(hit_sector).astype(np.int64, copy=False).ravel()
        check_hit_count("hit_sector", hit_sector, n)
        # A particle spans sectors when its hits' smallest and largest sector differ.
        low = np.full(len(m.particle_ids), np.iinfo(np.int64).max)
        high = np.full(len(m.particle_ids), np.iinfo(np.int64).min)
        np.minimum.at(low, m.particle_of_hit, hit_sector)
        np.maximum.at(high, m.particle_of_hit, hit_sector)
        spanning = low != high

    target = m.is_target
    return TrackMetrics.from_counts(
        n_target_particles=int(target.sum()),
        n_reconstructed_targets=int((target & m.reconstructed).sum()),
        n_tracks=int(m.candidate_track.sum()),
        n_matched_tracks=int(m.matched.sum()),
        n_duplicate_tracks=int(m.duplicate.sum()),
        trackml_score=trackml_score,
        trackml_score_max=trackml_score_max,
        n_impure_tracks=int(m.impure_track.sum()),
        n_spanning_targets=int((target & spanning).sum()),
        n_reconstructed_spanning=int((target & spanning & m.reconstructed).sum()),
        sectors_known=hit_sector is not None,
        n_reconstructed_atlas=int((target & m.reconstructed_atlas).sum()),
        n_reconstructed_one_way=int((target & m.reconstructed_one_way).sum()),
    )


def _ratio(numerator: int, denominator: int) -> float:
    return numerator / denominator if denominator else _NAN
