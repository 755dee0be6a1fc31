"""Node and edge features of an event graph, from hit positions and edges.

One definition for graphs built here (:mod:`partgnn.data.graphs.graph_builder`) and graphs read from
elsewhere (:mod:`partgnn.data.formats.acorn`), so a model trained on either scores the other. The
columns are :data:`~partgnn.data.graphs.graph_config.NODE_FEATURES` and
:data:`~partgnn.data.graphs.graph_config.EDGE_FEATURES`.
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


def cylindrical(xyz: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``r`` [mm], ``phi`` [rad], ``z`` [mm] and ``eta`` (seen from the origin) of hits
    ``(N, 3)`` [mm], each ``(N,)``."""
    r = np.hypot(xyz[:, 0], xyz[:, 1])
    z = xyz[:, 2]
    return r, np.arctan2(xyz[:, 1], xyz[:, 0]), z, np.arcsinh(z / np.maximum(r, 1e-9))


def slope_dr(dr: np.ndarray) -> np.ndarray:
    """``dr`` to divide by: values within :data:`MIN_DR` of 0 moved to +-MIN_DR (sign kept)."""
    return np.where(np.abs(dr) < MIN_DR, np.where(dr < 0, -MIN_DR, MIN_DR), dr)


def outer_first(first: np.ndarray, second: np.ndarray, r: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Whether each pair ``(first, second)`` runs outer to inner, ``(E,)``: ``first`` at the
    larger radius, or, at equal radii, the larger ``|z|`` (how edges are turned round so that
    they run inner to outer)."""
    return (r[first] > r[second]) | (
        (r[first] == r[second]) & (np.abs(z[first]) > np.abs(z[second]))
    )


def graph_features(
    xyz: np.ndarray, src: np.ndarray, dst: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Node features ``(N, 4)`` and edge features ``(E, 7)``, float32.

    Args:
        xyz: Hit positions ``(N, 3)`` [mm], float64.
        src: Inner hit of each edge ``(E,)``.
        dst: Outer hit of each edge ``(E,)``.
    """
    r, phi, z, eta = cylindrical(xyz)
    dr = r[dst] - r[src]
    dphi = wrap_phi(phi[dst] - phi[src])
    dz = z[dst] - z[src]
    deta = eta[dst] - eta[src]
    divisor = slope_dr(dr)
    phi_slope = dphi / (divisor / LENGTH_SCALE)
    z0 = z[src] - r[src] * dz / divisor
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
