"""From particle crossings to hits: second hits on overlapping modules, the sensors' resolution,
noise hits, and the module each hit lies on."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from partgnn.data.detector.detector_modules import detector_modules
from partgnn.data.detector.geometry import DetectorGeometry
from partgnn.data.simulation.propagation import MIN_COS_INCIDENCE
from partgnn.data.simulation.simulation_config import SimulationConfig


@dataclass(frozen=True)
class OverlapHits:
    """Second hits on overlapping modules: ``source (M,)`` indexes the crossing each comes from,
    ``position (M, 3)`` is its true position [mm]."""

    source: np.ndarray
    position: np.ndarray


def overlap_hits(
    geometry: DetectorGeometry,
    layer: np.ndarray,
    position: np.ndarray,
    momentum: np.ndarray,
    scale: float,
    rng: np.random.Generator,
) -> OverlapHits:
    """Draws which crossings also hit the overlapping neighbour module, and where.

    With probability ``scale * layer.overlap`` a crossing leaves a second hit, on a module plane
    ``layer.overlap_offset`` further out along the layer's normal (r on a barrel, |z| on a
    disk); the track is followed there in a straight line (over a few mm its curvature is
    negligible) and the path is capped at grazing incidence.

    Shapes: ``layer (N,)``, ``position, momentum (N, 3)``.
    """
    layers = geometry.layers
    probability = np.clip(scale * np.array([la.overlap for la in layers]), 0.0, 1.0)
    offset = np.array([la.overlap_offset for la in layers])
    barrel = np.array([la.is_barrel for la in layers])[layer]
    source = np.flatnonzero(rng.random(len(layer)) < probability[layer])
    pos, mom = position[source], momentum[source]
    unit = mom / np.linalg.norm(mom, axis=1, keepdims=True)
    step = offset[layer[source]]
    # Path length t to the second plane. Barrel: |(x, y) + t (ux, uy)| = r + offset, the
    # positive root of a t^2 + 2 b t + c = 0; disk: |z| grows by offset.
    a = unit[:, 0] ** 2 + unit[:, 1] ** 2
    b = pos[:, 0] * unit[:, 0] + pos[:, 1] * unit[:, 1]
    r = np.hypot(pos[:, 0], pos[:, 1])
    c = r**2 - (r + step) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        barrel_path = (-b + np.sqrt(b**2 - a * c)) / a
        disk_path = step / np.abs(unit[:, 2])
    path = np.where(barrel[source], barrel_path, disk_path)
    # Grazing tracks would travel far in the module's plane: cap the path as the material is.
    path = np.minimum(np.nan_to_num(path, nan=0.0), step / MIN_COS_INCIDENCE)
    return OverlapHits(source=source, position=pos + path[:, None] * unit)


def smear(
    geometry: DetectorGeometry,
    layer: np.ndarray,
    position: np.ndarray,
    scale: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Gaussian resolution in local coordinates: r*phi and z (barrel), r*phi and r (disk).

    Shapes: ``layer (N,)``, ``position (N, 3)`` -> measured positions ``(N, 3)``.
    """
    layers = geometry.layers
    sigma = scale * np.array([la.resolution for la in layers], dtype=np.float64).reshape(-1, 2)
    barrel = np.array([la.is_barrel for la in layers], dtype=bool)[layer]
    noise = rng.normal(size=(len(layer), 2)) * sigma[layer]
    r = np.hypot(position[:, 0], position[:, 1])
    phi = np.arctan2(position[:, 1], position[:, 0]) + noise[:, 0] / r
    r = np.where(barrel, r, r + noise[:, 1])
    z = np.where(barrel, position[:, 2] + noise[:, 1], position[:, 2])
    return np.stack([r * np.cos(phi), r * np.sin(phi), z], 1)


def smear_on_planes(
    geometry: DetectorGeometry,
    layer: np.ndarray,
    position: np.ndarray,
    rotation: np.ndarray,
    scale: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Gaussian resolution within each hit's module plane: the layer's ``sigma_rphi`` along the
    module's u axis, ``sigma_v`` along its v axis (the measured hit stays on the plane, as in
    real events).

    Shapes: ``layer (N,)``, ``position (N, 3)``, ``rotation (N, 3, 3)`` (columns u, v, w) ->
    measured positions ``(N, 3)``.
    """
    sigma = scale * np.array([la.resolution for la in geometry.layers], dtype=np.float64)
    noise = rng.normal(size=(len(layer), 2)) * sigma.reshape(-1, 2)[layer]
    return position + noise[:, :1] * rotation[..., 0] + noise[:, 1:] * rotation[..., 1]


def noise_hits(
    geometry: DetectorGeometry,
    config: SimulationConfig,
    n_signal: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Noise hits with a uniform density over the whole sensitive area.

    Their count is Poisson with mean ``n_signal * f / (1 - f)``, so that on average a fraction
    ``f = config.noise_fraction`` of all hits is noise. Each lands on a layer with probability
    proportional to its area, at a uniform phi, uniform z (barrel) or uniform r^2 (disk).

    Returns:
        Layer indices ``(M,)`` and positions ``(M, 3)`` [mm].
    """
    f = config.noise_fraction
    n = int(rng.poisson(n_signal * f / (1 - f))) if n_signal > 0 else 0
    layers = geometry.layers
    area = np.array(
        [
            2 * np.pi * la.position * (la.z_max - la.z_min)
            if la.is_barrel
            else np.pi * (la.r_max**2 - la.r_min**2)
            for la in layers
        ]
    )
    layer = rng.choice(len(layers), size=n, p=area / area.sum())
    barrel = np.array([la.is_barrel for la in layers])[layer]
    lo = np.array([la.z_min if la.is_barrel else la.r_min**2 for la in layers])[layer]
    hi = np.array([la.z_max if la.is_barrel else la.r_max**2 for la in layers])[layer]
    position = np.array([la.position for la in layers])[layer]
    v = rng.uniform(lo, hi)
    phi = rng.uniform(-np.pi, np.pi, n)
    # v is r^2 on disks; abs() keeps sqrt quiet on the barrel rows it does not select.
    r = np.where(barrel, position, np.sqrt(np.abs(v)))
    z = np.where(barrel, v, position)
    return layer, np.stack([r * np.cos(phi), r * np.sin(phi), z], 1).reshape(-1, 3)


def assign_modules(
    geometry: DetectorGeometry,
    layer: np.ndarray,
    true_position: np.ndarray,
    measured: np.ndarray,
    second: np.ndarray,
    overlap_source: np.ndarray,
    module_size: tuple[float, float],
) -> np.ndarray:
    """The module of every hit: the detector's own (:mod:`partgnn.data.detector.detector_modules`:
    the module whose outline holds the true position; a second hit of an overlap on another module
    than its first), or a grid's (:func:`grid_module_ids`) for a geometry without a module table.

    Shapes: ``layer, second (N,)``, ``true_position, measured (N, 3)``, ``overlap_source (M,)``
    (the first hit of each of the ``M`` second hits, which come last among the signal hits).

    Returns:
        Module ids ``(N,)``, int64.
    """
    modules = detector_modules(geometry)
    if modules is None:
        return grid_module_ids(geometry, layer, measured, module_size, second=second)
    first = ~second
    module = np.zeros(len(layer), dtype=np.int64)
    module[first] = modules.assign(layer[first], true_position[first])
    module[second] = modules.assign(
        layer[second], true_position[second], exclude=module[overlap_source]
    )
    return module


def grid_module_ids(
    geometry: DetectorGeometry,
    layer: np.ndarray,
    position: np.ndarray,
    module_size: tuple[float, float] = (30.0, 80.0),
    *,
    second: np.ndarray | None = None,
) -> np.ndarray:
    """Deterministic pseudo module numbers from a regular grid on each layer (for a geometry
    without a module table; the TrackML geometry's hits take its real modules:
    :mod:`partgnn.data.detector.detector_modules`).

    A layer is cut into ``n_phi`` equal phi sectors (``round(2 pi r_ref / width)``, at least 1;
    ``r_ref`` is the barrel radius or the disk's outer radius) and ``n_v`` equal bins along z
    (barrel) or r (disk) of about ``length`` each. ``module_id = 1 + i_v * n_phi + i_phi``,
    with ``i_phi`` counted from phi = -pi and ``i_v`` from ``z_min`` or ``r_min``; positions just
    outside the extent go to the edge bin.

    Args:
        geometry: The detector.
        layer: Layer index of each hit, shape ``(N,)``.
        position: Hit positions ``(x, y, z)`` [mm], shape ``(N, 3)``.
        module_size: ``(width along r*phi, length along z or r)`` [mm].
        second: Whether each hit is on the second, overlapping module plane of its layer,
            shape ``(N,)``; those modules are numbered after the first plane's
            (``+ n_phi * n_v``).

    Returns:
        Module numbers, shape ``(N,)``, dtype int64, from 1.
    """
    width, length = module_size
    layers = geometry.layers
    r_ref = np.array([la.position if la.is_barrel else la.r_max for la in layers])
    v_min = np.array([la.z_min if la.is_barrel else la.r_min for la in layers])
    v_span = np.array(
        [(la.z_max - la.z_min) if la.is_barrel else (la.r_max - la.r_min) for la in layers]
    )
    n_phi = np.maximum(1, np.round(2 * np.pi * r_ref / width)).astype(np.int64)
    n_v = np.maximum(1, np.ceil(v_span / length)).astype(np.int64)
    barrel = np.array([la.is_barrel for la in layers])

    r = np.hypot(position[:, 0], position[:, 1])
    phi = np.arctan2(position[:, 1], position[:, 0])
    v = np.where(barrel[layer], position[:, 2], r)
    i_phi = np.clip(np.floor((phi + np.pi) / (2 * np.pi) * n_phi[layer]), 0, n_phi[layer] - 1)
    i_v = np.clip(
        np.floor((v - v_min[layer]) / v_span[layer].clip(1e-9) * n_v[layer]), 0, n_v[layer] - 1
    )
    module = 1 + i_v.astype(np.int64) * n_phi[layer] + i_phi.astype(np.int64)
    if second is not None:
        module = module + np.where(second, (n_phi * n_v)[layer], 0)
    return module
