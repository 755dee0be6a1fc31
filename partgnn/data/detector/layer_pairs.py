"""Which detector layers are geometric neighbours, derived from the geometry by tracing rays.

Graph construction only connects hits on neighbouring layers; :func:`adjacent_layer_pairs` finds
those pairs (barrel-barrel, barrel-endcap, endcap-barrel, endcap-endcap) for any geometry.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from partgnn.data.detector.geometry import DetectorGeometry

#: Vertex z positions the rays start from [mm]: covers the TrackML luminous region
#: (sigma_z ~ 55 mm) to about 3 sigma, so pairs that only vertices far from z = 0 see are kept.
DEFAULT_VERTEX_Z: tuple[float, ...] = (-150.0, -75.0, 0.0, 75.0, 150.0)

#: Transverse momenta of the rays [GeV]; ``inf`` is a straight line. Straight lines suffice for
#: the TrackML layout: adding helices of 2, 1, 0.5 and 0.3 GeV finds no further pair (checked);
#: other layouts may pass finite values.
DEFAULT_RAY_PT: tuple[float, ...] = (float("inf"),)

# Speed of light factor: radius of curvature [mm] = pT [GeV] / (0.3 * B [T]) * 1000.
_CURVATURE_MM_PER_GEV_T = 1000.0 / 0.3


def adjacent_layer_pairs(
    geometry: DetectorGeometry,
    *,
    vertex_z: Sequence[float] = DEFAULT_VERTEX_Z,
    ray_pt: Sequence[float] = DEFAULT_RAY_PT,
    eta_max: float = 4.5,
    n_eta: int = 4001,
) -> np.ndarray:
    """Finds the pairs of layers that a particle from the beam line crosses one after the other.

    Rays start on the beam line at each ``vertex_z`` and go out at each pseudorapidity of a
    uniform grid of ``n_eta`` values in ``[-eta_max, eta_max]``. For each ray the crossings with
    every barrel cylinder (within its z extent) and every endcap disk (within its r extent) are
    ordered along the path, and each two consecutive crossings give a pair. A ray with finite
    ``pt`` is a helix in the geometry's field, followed for its outgoing half turn only (after
    that the particle comes back in and its hits are no longer ordered by distance from the
    vertex). The answer is the union over all rays, so it follows the geometry rather than a
    hard-coded list, and it never pairs the two endcaps (no ray crosses both).

    Args:
        geometry: The detector.
        vertex_z: Ray origins on the beam line [mm].
        ray_pt: Transverse momenta of the rays [GeV]; ``float("inf")`` for straight lines.
        eta_max: Largest absolute pseudorapidity of a ray.
        n_eta: Number of pseudorapidities in the grid; fine enough that no layer is skipped
            by falling between two grid rays.

    Returns:
        Layer index pairs ``(inner, outer)`` into ``geometry.layers``, shape ``(n_pairs, 2)``,
        dtype int64, sorted and unique. ``inner`` is the layer crossed first.
    """
    layers = geometry.layers
    is_barrel = np.array([layer.is_barrel for layer in layers])
    position = np.array([layer.position for layer in layers], dtype=np.float64)
    r_min = np.array([layer.r_min for layer in layers], dtype=np.float64)
    r_max = np.array([layer.r_max for layer in layers], dtype=np.float64)
    z_min = np.array([layer.z_min for layer in layers], dtype=np.float64)
    z_max = np.array([layer.z_max for layer in layers], dtype=np.float64)

    eta = np.linspace(-eta_max, eta_max, n_eta)
    found: set[tuple[int, int]] = set()
    for pt in ray_pt:
        radius = np.inf if np.isinf(pt) else pt * _CURVATURE_MM_PER_GEV_T / geometry.b_field
        for z0 in vertex_z:
            # s: transverse path length at which each ray (row) crosses each layer (column);
            # inf where it does not cross within the surface's extent.
            s = _crossing_path_lengths(
                eta, z0, radius, is_barrel, position, r_min, r_max, z_min, z_max
            )
            order = np.argsort(s, axis=1, kind="stable")
            s_sorted = np.take_along_axis(s, order, axis=1)
            valid = np.isfinite(s_sorted[:, 1:])  # both crossings real (sorted, so the first is)
            inner = order[:, :-1][valid]
            outer = order[:, 1:][valid]
            found.update(zip(inner.tolist(), outer.tolist(), strict=True))
    if not found:
        return np.zeros((0, 2), dtype=np.int64)
    return np.array(sorted(found), dtype=np.int64)


def _crossing_path_lengths(
    eta: np.ndarray,
    z0: float,
    radius: float,
    is_barrel: np.ndarray,
    position: np.ndarray,
    r_min: np.ndarray,
    r_max: np.ndarray,
    z_min: np.ndarray,
    z_max: np.ndarray,
) -> np.ndarray:
    """Transverse path length from the vertex to each layer crossing, shape ``(n_eta, n_layers)``.

    A helix of transverse radius ``radius`` (``inf`` for a line) has ``r(s) = 2 R sin(s / 2R)``
    and ``z(s) = z0 + s sinh(eta)``; only ``s <= pi R`` (the outgoing half turn) counts.
    """
    cot_theta = np.sinh(eta)[:, None]
    s_max = np.pi * radius
    with np.errstate(divide="ignore", invalid="ignore"):
        # Barrel: the path length at which r(s) reaches the cylinder radius.
        if np.isinf(radius):
            s_barrel = np.broadcast_to(position, (len(eta), len(position)))
        else:
            ratio = position / (2.0 * radius)
            s_barrel = np.where(
                ratio <= 1.0, 2.0 * radius * np.arcsin(np.minimum(ratio, 1.0)), np.inf
            )
            s_barrel = np.broadcast_to(s_barrel, (len(eta), len(position)))
        z_at_barrel = z0 + s_barrel * cot_theta
        barrel_ok = (z_at_barrel >= z_min) & (z_at_barrel <= z_max)
        # Endcap: the path length at which z(s) reaches the disk; must be ahead of the vertex.
        s_endcap = (position - z0) / cot_theta
        if np.isinf(radius):
            r_at_endcap = s_endcap
        else:
            r_at_endcap = 2.0 * radius * np.sin(np.clip(s_endcap, 0.0, s_max) / (2.0 * radius))
        endcap_ok = (s_endcap > 0) & (r_at_endcap >= r_min) & (r_at_endcap <= r_max)
    s = np.where(is_barrel, s_barrel, s_endcap)
    ok = np.where(is_barrel, barrel_ok, endcap_ok) & (s <= s_max) & np.isfinite(s)
    return np.where(ok, s, np.inf)


def layers_between(geometry: DetectorGeometry, inner: int, outer: int) -> np.ndarray:
    """Layers that a straight segment from layer ``inner`` to layer ``outer`` may cross.

    A layer qualifies when its surface lies strictly inside the (r, z) bounding box of the two
    layers' extents: a barrel whose radius is between their radii and whose z range overlaps
    theirs, or a disk whose z is between theirs and whose r range overlaps theirs. Graph
    construction drops an edge whose segment really crosses one of them: its hits are then not
    on adjacent layers for that track, even though the two layers are adjacent for other tracks
    (e.g. pixel barrel layer 3 -> strip barrel layer 1, adjacent only through the gap at the
    end of pixel barrel layer 4).

    Args:
        geometry: The detector.
        inner: Index of the inner layer in ``geometry.layers``.
        outer: Index of the outer layer in ``geometry.layers``.

    Returns:
        Layer indices, shape ``(n,)``, dtype int64, ascending.
    """
    a, b = geometry.layers[inner], geometry.layers[outer]
    r_lo, r_hi = min(a.r_min, b.r_min), max(a.r_max, b.r_max)
    z_lo, z_hi = min(a.z_min, b.z_min), max(a.z_max, b.z_max)
    between = []
    for index, layer in enumerate(geometry.layers):
        if index in (inner, outer):
            continue
        if layer.is_barrel:
            inside = r_lo < layer.position < r_hi and layer.z_max > z_lo and layer.z_min < z_hi
        else:
            inside = z_lo < layer.position < z_hi and layer.r_max > r_lo and layer.r_min < r_hi
        if inside:
            between.append(index)
    return np.array(between, dtype=np.int64)
