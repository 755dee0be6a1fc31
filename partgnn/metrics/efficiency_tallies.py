"""What efficiency plots are made of: every target edge, target particle and candidate track
of the evaluated events, with where it lies and whether it passed; and the binomial rate of
any of them in bins.

``partgnn evaluate --plots`` collects them while it evaluates (:meth:`EfficiencyTallies.
add_event`, on the same target edges, cut and track matching its numbers count), so each plot's
bins add up to the evaluation's own counts: the target edge efficiency's target edges and those
kept, the track efficiency's target particles and those matched, the impure rate's candidate
tracks and the impure ones. Positions are the hits' (``r``, ``z`` [mm], ``eta`` from the
origin): an edge's is the mean of its two hits', a particle's or a track's eta the mean of its
hits'.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from torch_geometric.data import Data

from partgnn.data.graphs.graph_features import LENGTH_SCALE
from partgnn.metrics.track_matching import TrackMatching


@dataclass(frozen=True)
class BinnedRate:
    """A rate in bins, with its binomial uncertainty.

    Attributes:
        edges: ``(B + 1,)`` bin edges; values beyond them are counted in the first or last bin.
        passed: ``(B,)`` items that passed, per bin (k).
        total: ``(B,)`` items, per bin (n).
    """

    edges: np.ndarray
    passed: np.ndarray
    total: np.ndarray

    @property
    def rate(self) -> np.ndarray:
        """``k / n`` per bin (NaN where a bin is empty)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.total > 0, self.passed / np.maximum(self.total, 1), np.nan)

    @property
    def error(self) -> np.ndarray:
        """The binomial standard error ``sqrt(p (1 - p) / n)`` per bin (NaN where empty)."""
        p = self.rate
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.sqrt(p * (1 - p) / np.maximum(self.total, 1))


def binned_rate(values: np.ndarray, passed: np.ndarray, edges: np.ndarray) -> BinnedRate:
    """The rate of ``passed`` among ``values`` in the bins of ``edges`` (every value counted:
    those beyond the edges in the first or last bin)."""
    bins = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, len(edges) - 2)
    total = np.bincount(bins, minlength=len(edges) - 1)
    hits = np.bincount(bins, weights=passed.astype(np.float64), minlength=len(edges) - 1)
    return BinnedRate(np.asarray(edges, dtype=np.float64), hits.astype(np.int64), total)


@dataclass
class EfficiencyTallies:
    """Every target edge, target particle and candidate track of the events evaluated.

    Attributes:
        edge_pt, edge_eta, edge_r, edge_z, edge_kept: Per target edge: its particle's pT
            [GeV], its eta, r and z [mm], and whether it scored above the cut.
        particle_pt, particle_eta, particle_matched: Per target particle: pT, eta, matched by
            a candidate track (double majority: the track efficiency's numerator).
        track_eta, track_impure: Per candidate track: eta, and whether no particle holds the
            majority of its hits (the impure rate's numerator).
    """

    edge_pt: list[np.ndarray] = field(default_factory=list)
    edge_eta: list[np.ndarray] = field(default_factory=list)
    edge_r: list[np.ndarray] = field(default_factory=list)
    edge_z: list[np.ndarray] = field(default_factory=list)
    edge_kept: list[np.ndarray] = field(default_factory=list)
    particle_pt: list[np.ndarray] = field(default_factory=list)
    particle_eta: list[np.ndarray] = field(default_factory=list)
    particle_matched: list[np.ndarray] = field(default_factory=list)
    track_eta: list[np.ndarray] = field(default_factory=list)
    track_impure: list[np.ndarray] = field(default_factory=list)

    def add_event(
        self,
        graph: Data,
        scores: np.ndarray,
        cut: float,
        target: np.ndarray,
        matching: TrackMatching,
    ) -> None:
        """Adds one event's items.

        Args:
            graph: The event's graph (``x``: ``r / 1000``, ``phi / pi``, ``z / 1000``, ``eta``).
            scores: ``(E,)`` its edge scores.
            cut: The score cut (an edge is kept above it).
            target: ``(E,)`` its target edges.
            matching: Its tracks matched to its particles (:func:`~partgnn.metrics.tracks.
                match_tracks`).
        """
        x = graph.x.double().numpy()
        r, z, eta = x[:, 0] * LENGTH_SCALE, x[:, 2] * LENGTH_SCALE, x[:, 3]
        src, dst = graph.edge_index.numpy()[:, target]
        self.edge_pt.append(graph.particle_pt.double().numpy()[src])
        self.edge_eta.append(0.5 * (eta[src] + eta[dst]))
        self.edge_r.append(0.5 * (r[src] + r[dst]))
        self.edge_z.append(0.5 * (z[src] + z[dst]))
        self.edge_kept.append(np.asarray(scores)[target] > cut)
        m = matching
        hits = np.bincount(m.particle_of_hit, minlength=len(m.particle_ids))
        mean_eta = np.bincount(m.particle_of_hit, weights=eta, minlength=len(hits)) / np.maximum(
            hits, 1
        )
        self.particle_pt.append(m.particle_pt[m.is_target])
        self.particle_eta.append(mean_eta[m.is_target])
        self.particle_matched.append(m.reconstructed[m.is_target])
        track_eta = np.bincount(
            m.track_of_hit, weights=eta[m.assigned], minlength=len(m.track_labels)
        ) / np.maximum(m.n_track_hits, 1)
        self.track_eta.append(track_eta[m.candidate_track])
        self.track_impure.append(m.impure_track[m.candidate_track])

    def joined(self, name: str) -> np.ndarray:
        """One attribute's values over every event added."""
        parts = getattr(self, name)
        return np.concatenate(parts) if parts else np.zeros(0)
