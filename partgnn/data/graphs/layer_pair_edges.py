"""Candidate edges between adjacent layers, as
:func:`~partgnn.data.graphs.graph_builder.build_event_graph` builds them without a module map:
per layer pair, each inner hit's window of outer hits (phi-sorted, z/r-binned; never all pairs),
then the geometric cuts on phi slope, z0 and delta eta, and no edge that skips a layer it
crosses."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from partgnn.data.detector.geometry import DetectorGeometry
from partgnn.data.detector.layer_pairs import adjacent_layer_pairs, layers_between
from partgnn.data.graphs.graph_config import GraphBuildConfig
from partgnn.data.graphs.graph_features import wrap_phi

# Windows are looked up in one sorted array of keys ``bin * _BIN_STRIDE + phi + offset``; the
# three phi copies (phi - 2 pi, phi, phi + 2 pi, shifted by 3 pi) span [0, 6 pi] < _BIN_STRIDE,
# so bins never overlap and a window that crosses phi = +-pi wraps around.
_BIN_STRIDE = 32.0
_PHI_OFFSET = 3.0 * math.pi


@dataclass(frozen=True)
class HitCoordinates:
    """An event's hits in cylindrical coordinates, each ``(N,)``: ``r`` [mm], ``phi`` [rad],
    ``z`` [mm], ``eta``."""

    r: np.ndarray
    phi: np.ndarray
    z: np.ndarray
    eta: np.ndarray


@functools.lru_cache(maxsize=8)
def _layer_pair_plan(geometry: DetectorGeometry) -> tuple[tuple[int, int, np.ndarray], ...]:
    """``(inner, outer, layers_between)`` for each adjacent pair; cached, geometries repeat."""
    return tuple(
        (inner, outer, layers_between(geometry, inner, outer))
        for inner, outer in adjacent_layer_pairs(geometry).tolist()
    )


def edges_between_layer_pairs(
    hits: HitCoordinates,
    layer: np.ndarray,
    geometry: DetectorGeometry,
    config: GraphBuildConfig,
) -> tuple[np.ndarray, np.ndarray]:
    """Source and target hit indices of all edges, shapes ``(E,)``, ``(E,)``."""
    by_layer = np.argsort(layer, kind="stable")
    bounds = np.searchsorted(layer[by_layer], np.arange(layer.max(initial=-1) + 2))
    n_layers = len(bounds) - 1
    src_parts, dst_parts = [], []
    for inner_layer, outer_layer, blockers in _layer_pair_plan(geometry):
        if inner_layer >= n_layers or outer_layer >= n_layers:
            continue
        inner = by_layer[bounds[inner_layer] : bounds[inner_layer + 1]]
        outer = by_layer[bounds[outer_layer] : bounds[outer_layer + 1]]
        if len(inner) == 0 or len(outer) == 0:
            continue
        outer_is_barrel = geometry.layers[outer_layer].is_barrel
        src, dst = _candidate_edges(hits, inner, outer, outer_is_barrel, config)
        src, dst = _apply_cuts(hits, src, dst, config)
        if len(blockers) and len(src):
            crossed = _crosses_layers(hits, src, dst, geometry, blockers, config.crossing_margin)
            src, dst = src[~crossed], dst[~crossed]
        src_parts.append(src)
        dst_parts.append(dst)
    if not src_parts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    return np.concatenate(src_parts), np.concatenate(dst_parts)


def _candidate_edges(
    hits: HitCoordinates,
    inner: np.ndarray,
    outer: np.ndarray,
    outer_is_barrel: bool,
    config: GraphBuildConfig,
) -> tuple[np.ndarray, np.ndarray]:
    """Candidate (inner, outer) hit pairs of one layer pair: a superset of those passing cuts.

    The outer hits are binned along the layer (z on a barrel, r on a disk) and sorted by phi
    within each bin. Each inner hit looks up, in the bins its z0 range can reach, the phi
    window ``phi +- phi_slope_max * dr_max``; the cost is the number of candidates, not
    ``len(inner) * len(outer)``.
    """
    z0_max, phi_slope_max = config.z0_max, config.phi_slope_max
    r1, z1, phi1 = hits.r[inner], hits.z[inner], hits.phi[inner]
    r2, z2 = hits.r[outer], hits.z[outer]
    z0_corners = (-z0_max, z0_max)
    with np.errstate(divide="ignore", invalid="ignore"):
        if outer_is_barrel:
            # The line from (r=0, z0) through the inner hit reaches radius r at
            # z = z0 + (z1 - z0) * r / r1; bilinear in (z0, r), so the corners bound it.
            u_outer = z2
            corners = [z0 + (z1 - z0) * r / r1 for z0 in z0_corners for r in (r2.min(), r2.max())]
            u_lo, u_hi = np.min(corners, axis=0), np.max(corners, axis=0)
            dr_max = r2.max() - r1
        else:
            # On a disk at z the line gives r = r1 * (z - z0) / (z1 - z0), monotonic in z and in
            # z0 unless z1 - z0 changes sign (inner hit within the luminous region): then any r.
            u_outer = r2
            corners = [r1 * (z - z0) / (z1 - z0) for z0 in z0_corners for z in (z2.min(), z2.max())]
            u_lo, u_hi = np.min(corners, axis=0), np.max(corners, axis=0)
            unbounded = np.abs(z1) <= z0_max
            u_lo = np.where(unbounded, -np.inf, u_lo)
            u_hi = np.where(unbounded, np.inf, u_hi)
            dr_max = np.minimum(u_hi, r2.max()) - r1
    u_min, u_max = u_outer.min(), u_outer.max()
    reach = (dr_max > 0) & (u_hi >= u_min) & (u_lo <= u_max)
    if not reach.any():
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    inner, r1, phi1 = inner[reach], r1[reach], phi1[reach]
    u_lo, u_hi, dr_max = u_lo[reach], u_hi[reach], dr_max[reach]
    half_width = np.minimum(phi_slope_max * dr_max, math.pi)

    # Bins about a quarter of the typical z0 window wide: few wasted candidates at the window
    # ends, few empty (inner, bin) lookups.
    window = np.clip(u_hi, u_min, u_max) - np.clip(u_lo, u_min, u_max)
    typical = float(np.median(window))
    extent = float(u_max - u_min)
    n_bins = int(np.clip(math.ceil(4.0 * extent / typical), 1, 512)) if typical > 0 else 1
    bin_width = extent / n_bins if extent > 0 else 1.0
    outer_bin = np.clip(((u_outer - u_min) / bin_width).astype(np.int64), 0, n_bins - 1)
    bin_lo = np.clip(np.floor((u_lo - u_min) / bin_width), 0, n_bins - 1).astype(np.int64)
    bin_hi = np.clip(np.floor((u_hi - u_min) / bin_width), 0, n_bins - 1).astype(np.int64)

    # Keys of the outer hits and their copies at phi -+ 2 pi, sorted once.
    n_outer = len(outer)
    phi2 = hits.phi[outer]
    keys = np.concatenate(
        [
            outer_bin * _BIN_STRIDE + phi2 + _PHI_OFFSET + shift
            for shift in (-2 * math.pi, 0.0, 2 * math.pi)
        ]
    )
    key_order = np.argsort(keys, kind="stable")
    keys = keys[key_order]

    # One lookup per (inner hit, bin) it reaches.
    n_bins_per_hit = bin_hi - bin_lo + 1
    lookup_hit = np.repeat(np.arange(len(inner)), n_bins_per_hit)
    lookup_bin = bin_lo[lookup_hit] + _ranks_within_runs(n_bins_per_hit)
    centre = lookup_bin * _BIN_STRIDE + phi1[lookup_hit] + _PHI_OFFSET
    width = half_width[lookup_hit]
    # Half-open [phi - w, phi + w) with w <= pi holds each outer hit at most once.
    start = np.searchsorted(keys, centre - width, side="left")
    stop = np.searchsorted(keys, centre + width, side="left")
    count = stop - start
    candidate_lookup = np.repeat(np.arange(len(lookup_hit)), count)
    position = start[candidate_lookup] + _ranks_within_runs(count)
    src = inner[lookup_hit[candidate_lookup]]
    dst = outer[key_order[position] % n_outer]
    return src, dst


def _ranks_within_runs(lengths: np.ndarray) -> np.ndarray:
    """``[0, 1, ..., n0 - 1, 0, 1, ..., n1 - 1, ...]`` for run lengths ``n``, shape ``(sum n,)``."""
    total = int(lengths.sum())
    run_start = np.cumsum(lengths) - lengths
    return np.arange(total) - np.repeat(run_start, lengths)


def _apply_cuts(
    hits: HitCoordinates, src: np.ndarray, dst: np.ndarray, config: GraphBuildConfig
) -> tuple[np.ndarray, np.ndarray]:
    """Keeps the candidate edges that pass the phi slope, z0 and delta-eta cuts."""
    r1, r2 = hits.r[src], hits.r[dst]
    dr = r2 - r1
    dz = hits.z[dst] - hits.z[src]
    dphi = wrap_phi(hits.phi[dst] - hits.phi[src])
    # |z0| <= z0_max with z0 = z1 - r1 * dz / dr, multiplied by dr > 0 to avoid dividing.
    keep = (
        (dr > 0)
        & (np.abs(dphi) <= config.phi_slope_max * dr)
        & (np.abs(hits.z[src] * dr - r1 * dz) <= config.z0_max * dr)
        & (np.abs(hits.eta[dst] - hits.eta[src]) <= config.deta_max)
    )
    return src[keep], dst[keep]


def _crosses_layers(
    hits: HitCoordinates,
    src: np.ndarray,
    dst: np.ndarray,
    geometry: DetectorGeometry,
    blockers: np.ndarray,
    margin: float,
) -> np.ndarray:
    """Whether the straight (r, z) segment of each edge crosses one of ``blockers``, (E,).

    A crossing counts only at least ``margin`` inside the layer's extent, so tracks that pass
    just beside a layer's edge (curvature, module overhangs) keep their edge.
    """
    r1, z1 = hits.r[src], hits.z[src]
    dr, dz = hits.r[dst] - r1, hits.z[dst] - z1
    crossed = np.zeros(len(src), dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        for index in blockers.tolist():
            layer = geometry.layers[index]
            if layer.is_barrel:
                t = (layer.position - r1) / dr
                along = z1 + t * dz
                low, high = layer.z_min + margin, layer.z_max - margin
            else:
                t = (layer.position - z1) / dz
                along = r1 + t * dr
                low, high = layer.r_min + margin, layer.r_max - margin
            crossed |= (t > 0) & (t < 1) & (along >= low) & (along <= high)
    return crossed
