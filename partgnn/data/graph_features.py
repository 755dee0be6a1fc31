"""Node and edge features of an event graph, from hit positions and edges.

One definition for graphs built here (:mod:`partgnn.data.graph_builder`) and graphs read from
elsewhere (:mod:`partgnn.data.acorn`), so a model trained on either scores the other. The
columns are :data:`~partgnn.data.graph_config.NODE_FEATURES` and
:data:`~partgnn.data.graph_config.EDGE_FEATURES`.
"""

from __future__ import annotations

import math

import numpy as np

#: Scale of r and z in the features: metres keep them O(1) like phi / pi and eta.
LENGTH_SCALE = 1000.0

#: Smallest |dr| [mm] a slope divides by: edges between hits at the same radius (possible in
#: imported graphs, never in built ones, whose layers are centimetres apart) keep finite
#: ``phi_slope`` and ``z0``.
MIN_DR = 1e-3


def wrap_phi(dphi: np.ndarray) -> np.ndarray:
    """Wraps angle differences to ``(-pi, pi]``."""
    wrapped = np.remainder(dphi + math.pi, 2.0 * math.pi) - math.pi
    return np.where(wrapped == -math.pi, math.pi, wrapped)


def graph_features(
    xyz: np.ndarray, src: np.ndarray, dst: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Node features ``(N, 4)`` and edge features ``(E, 7)``, float32.

    Args:
        xyz: Hit positions ``(N, 3)`` [mm], float64.
        src: Inner hit of each edge ``(E,)``.
        dst: Outer hit of each edge ``(E,)``.
    """
    r = np.hypot(xyz[:, 0], xyz[:, 1])
    phi = np.arctan2(xyz[:, 1], xyz[:, 0])
    z = xyz[:, 2]
    eta = np.arcsinh(z / np.maximum(r, 1e-9))
    dr = r[dst] - r[src]
    dphi = wrap_phi(phi[dst] - phi[src])
    dz = z[dst] - z[src]
    deta = eta[dst] - eta[src]
    slope_dr = np.where(np.abs(dr) < MIN_DR, np.where(dr < 0, -MIN_DR, MIN_DR), dr)
    phi_slope = dphi / (slope_dr / LENGTH_SCALE)
    z0 = z[src] - r[src] * dz / slope_dr
    edge_attr = np.stack(
        [
            dr / LENGTH_SCALE,
            dphi,
            dz / LENGTH_SCALE,
            deta,
            np.hypot(deta, dphi),
            phi_slope,
            z0 / LENGTH_SCALE,
        ],
        axis=1,
    )
    x = np.stack([r / LENGTH_SCALE, phi / math.pi, z / LENGTH_SCALE, eta], axis=1)
    return x.astype(np.float32), edge_attr.astype(np.float32)
