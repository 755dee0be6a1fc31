"""Geometric sectors of the detector: phi wedges, eta slices and phi x eta grids of hits.

Sector boundaries sit at population quantiles of the hits, so sectors hold equal numbers of
nodes (up to one node, and ties). :func:`fit_sectors` returns them as a
:class:`GeometricSectors`, whose :meth:`~GeometricSectors.assign` puts any hits into the same
sectors (for plots, or for reusing one event's boundaries on another);
:func:`geometric_partition` does both for one graph.

Glossary: ``phi = atan2(y, x)`` in ``[-pi, pi]``; ``eta = asinh(z / r)``, the pseudorapidity of
the hit seen from the origin, with ``r = hypot(x, y)``; positions in mm. A grid is
``(n_phi, n_eta)``; the sector in phi wedge ``i`` of eta slice ``j`` is part ``j * n_phi + i``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral

import numpy as np

from partgnn.errors import InputError

#: Geometric partition methods: phi wedges, eta slices, and a phi x eta grid.
GEOMETRIC_METHODS: tuple[str, ...] = ("phi", "eta", "phieta")

# Hits on the beam line (r = 0) get r = 1e-9 mm: a finite eta (|eta| < 30), not inf or nan.
_MIN_R = 1e-9

# Without any hits to take quantiles of, boundaries split these ranges evenly; |eta| < 4 is the
# TrackML acceptance.
_NOMINAL_PHI = (-math.pi, math.pi)
_NOMINAL_ETA = (-4.0, 4.0)


@dataclass(frozen=True, eq=False)
class GeometricSectors:
    """Boundaries of a phi x eta grid of sectors; eta slices first, phi wedges within each.

    Each eta slice has its own phi boundaries (quantiles of the hits in that slice), which keeps
    the sectors balanced where the phi distribution changes with eta. A hit on a boundary belongs
    to the sector above it. The outer edges are ``-pi, pi`` in phi and ``-inf, inf`` in eta, so
    every hit falls in a sector.

    Attributes:
        eta_edges: Eta boundaries, shape ``(n_eta + 1,)``, non-decreasing, from ``-inf`` to
            ``inf``.
        phi_edges: Phi boundaries of each eta slice, shape ``(n_eta, n_phi + 1)``, each row
            non-decreasing from ``-pi`` to ``pi``.
    """

    eta_edges: np.ndarray
    phi_edges: np.ndarray

    def __post_init__(self) -> None:
        eta_edges = np.array(self.eta_edges, dtype=np.float64)
        phi_edges = np.array(self.phi_edges, dtype=np.float64)
        if eta_edges.ndim != 1 or eta_edges.size < 2:
            raise InputError(f"eta_edges must have shape (n_eta + 1,) (got {eta_edges.shape})")
        n_eta = eta_edges.size - 1
        if phi_edges.ndim != 2 or phi_edges.shape[0] != n_eta or phi_edges.shape[1] < 2:
            raise InputError(
                f"phi_edges must have shape (n_eta, n_phi + 1) = ({n_eta}, n_phi + 1) "
                f"(got {phi_edges.shape})"
            )
        # Look-ups bisect the boundaries, which only works if they are sorted.
        if (np.diff(eta_edges) < 0).any() or (np.diff(phi_edges, axis=1) < 0).any():
            raise InputError("sector boundaries (eta_edges, phi_edges rows) must be non-decreasing")
        # Read-only copies: the sectors are a value, shared between partitioning and plots.
        eta_edges.setflags(write=False)
        phi_edges.setflags(write=False)
        object.__setattr__(self, "eta_edges", eta_edges)
        object.__setattr__(self, "phi_edges", phi_edges)

    @property
    def grid(self) -> tuple[int, int]:
        """``(n_phi, n_eta)``."""
        return self.phi_edges.shape[1] - 1, self.eta_edges.size - 1

    @property
    def n_parts(self) -> int:
        """Number of sectors, ``n_phi * n_eta``."""
        n_phi, n_eta = self.grid
        return n_phi * n_eta

    def assign(self, pos: object) -> np.ndarray:
        """Sector of every hit.

        Args:
            pos: Hit positions ``(x, y, z)`` in mm, shape ``(N, 3)``; numpy array or tensor.

        Returns:
            Sector (part) of every hit, shape ``(N,)``, int64 in ``[0, n_parts)``.

        Raises:
            InputError: If ``pos`` is not a finite ``(N, 3)`` array.
        """
        phi, eta = sector_coordinates(pos)
        return self.assign_coordinates(phi, eta)

    def assign_coordinates(self, phi: np.ndarray, eta: np.ndarray) -> np.ndarray:
        """Sector of every hit given its ``phi`` and ``eta``, each of shape ``(N,)``."""
        n_phi, _ = self.grid
        eta_slice = np.searchsorted(self.eta_edges[1:-1], eta, side="right")
        if n_phi == 1:
            return eta_slice.astype(np.int64)
        part = np.empty(eta_slice.shape, dtype=np.int64)
        for j, edges in enumerate(self.phi_edges):
            in_slice = eta_slice == j
            wedge = np.searchsorted(edges[1:-1], phi[in_slice], side="right")
            part[in_slice] = j * n_phi + wedge
        return part


def geometric_partition(
    pos: object, n_parts: int, method: str = "phi", *, grid: tuple[int, int] | None = None
) -> np.ndarray:
    """Partitions hits into balanced phi wedges, eta slices or a phi x eta grid.

    Args:
        pos: Hit positions ``(x, y, z)`` in mm, shape ``(N, 3)``; numpy array or tensor.
        n_parts: Number of parts ``P >= 1``; with ``P > N`` some parts are empty.
        method: ``"phi"`` (``P`` wedges), ``"eta"`` (``P`` slices) or ``"phieta"`` (a grid).
        grid: ``(n_phi, n_eta)`` for ``"phieta"``, with ``n_phi * n_eta == P``; default
            :func:`default_grid`.

    Returns:
        Part of every node, shape ``(N,)``, int64 in ``[0, n_parts)``. Deterministic: no
        randomness is involved.

    Raises:
        InputError: If an argument is invalid (see :func:`sector_grid`) or ``pos`` is not a
            finite ``(N, 3)`` array.
    """
    phi, eta = sector_coordinates(pos)
    sectors = _fit(phi, eta, sector_grid(method, n_parts, grid))
    return sectors.assign_coordinates(phi, eta)


def fit_sectors(pos: object, grid: tuple[int, int]) -> GeometricSectors:
    """Sector boundaries at population quantiles of the hits.

    Eta boundaries split all hits into ``n_eta`` equal slices; then the phi boundaries of each
    slice split its hits into ``n_phi`` equal wedges. Phi quantiles are taken in ``[-pi, pi]``,
    so one wedge boundary is always at ``phi = +-pi`` (wedges stay contiguous arcs: the first and
    last meet there). Slices without hits get evenly spaced boundaries.

    Args:
        pos: Hit positions ``(x, y, z)`` in mm, shape ``(N, 3)``; numpy array or tensor.
        grid: ``(n_phi, n_eta)``, both ``>= 1``.

    Returns:
        The boundaries; ``sectors.assign(pos)`` gives parts whose sizes differ by at most one
        within each eta slice (more only where hits share a coordinate).

    Raises:
        InputError: If ``grid`` is not two integers ``>= 1`` or ``pos`` is malformed.
    """
    grid = _check_grid(grid)
    phi, eta = sector_coordinates(pos)
    return _fit(phi, eta, grid)


def sector_grid(method: str, n_parts: int, grid: tuple[int, int] | None = None) -> tuple[int, int]:
    """The ``(n_phi, n_eta)`` grid of a geometric method for ``n_parts`` parts.

    Args:
        method: ``"phi"`` gives ``(P, 1)``, ``"eta"`` gives ``(1, P)``, ``"phieta"`` gives
            ``grid`` or :func:`default_grid`.
        n_parts: Number of parts ``P >= 1``.
        grid: Only for ``"phieta"``: ``(n_phi, n_eta)`` with ``n_phi * n_eta == P``.

    Returns:
        ``(n_phi, n_eta)``.

    Raises:
        InputError: If the method is unknown, ``n_parts < 1``, a grid is given for another
            method than ``"phieta"``, or its product is not ``n_parts``.
    """
    if method not in GEOMETRIC_METHODS:
        raise InputError(
            f"unknown geometric method {method!r} (choose {', '.join(GEOMETRIC_METHODS)})"
        )
    _check_n_parts(n_parts)
    if grid is not None and method != "phieta":
        raise InputError(f"a sector grid applies to method 'phieta' only (got method {method!r})")
    if method == "phi":
        return int(n_parts), 1
    if method == "eta":
        return 1, int(n_parts)
    if grid is None:
        return default_grid(n_parts)
    n_phi, n_eta = _check_grid(grid)
    if n_phi * n_eta != n_parts:
        raise InputError(f"grid {n_phi}x{n_eta} has {n_phi * n_eta} sectors, not parts = {n_parts}")
    return n_phi, n_eta


def default_grid(n_parts: int) -> tuple[int, int]:
    """The most square ``(n_phi, n_eta)`` with ``n_phi * n_eta == n_parts`` and ``n_phi >= n_eta``.

    More wedges than slices because eta boundaries cut more edges: candidate edges span up to
    1.5 in eta but only a narrow phi window. On a simulated pile-up-200 graph (no pT cut), 8
    parts as 4x2 cut 10% of the edges, as 2x4 17%, 8 wedges 7%, 8 slices 27%. E.g. 8 -> (4, 2),
    6 -> (3, 2), 4 -> (2, 2), a prime 7 -> (7, 1).
    """
    _check_n_parts(n_parts)
    n_eta = max(d for d in range(1, math.isqrt(n_parts) + 1) if n_parts % d == 0)
    return n_parts // n_eta, n_eta


def sector_coordinates(pos: object) -> tuple[np.ndarray, np.ndarray]:
    """``phi`` and ``eta`` of hits (see the module glossary).

    Args:
        pos: Hit positions ``(x, y, z)`` in mm, shape ``(N, 3)``; numpy array or tensor.

    Returns:
        ``(phi, eta)``, float64 arrays of shape ``(N,)``; ``phi`` in ``[-pi, pi]``.

    Raises:
        InputError: If ``pos`` is not a numeric ``(N, 3)`` array of finite values.
    """
    pos = check_pos(pos)
    x, y, z = pos[:, 0], pos[:, 1], pos[:, 2]
    r = np.hypot(x, y)
    return np.arctan2(y, x), np.arcsinh(z / np.maximum(r, _MIN_R))


def check_pos(pos: object) -> np.ndarray:
    """Validates hit positions and returns them as a float64 numpy array of shape ``(N, 3)``.

    Raises:
        InputError: If ``pos`` is not a numeric ``(N, 3)`` array of finite values.
    """
    if hasattr(pos, "detach"):  # a torch tensor, possibly on an accelerator
        pos = pos.detach().cpu().numpy()
    array = np.asarray(pos)
    if array.ndim != 2 or array.shape[1] != 3:
        raise InputError(f"pos must have shape (N, 3) (got {tuple(array.shape)})")
    if array.size and not (
        np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)
    ):
        raise InputError(f"pos must hold numbers (got {array.dtype})")
    array = array.astype(np.float64, copy=False)
    if not np.isfinite(array).all():
        raise InputError(f"pos has {int((~np.isfinite(array)).sum())} non-finite values")
    return array


def _fit(phi: np.ndarray, eta: np.ndarray, grid: tuple[int, int]) -> GeometricSectors:
    n_phi, n_eta = grid
    eta_edges = _quantile_edges(eta, n_eta, (-math.inf, math.inf), _NOMINAL_ETA)
    eta_slice = np.searchsorted(eta_edges[1:-1], eta, side="right")
    phi_edges = np.stack(
        [
            _quantile_edges(phi[eta_slice == j], n_phi, _NOMINAL_PHI, _NOMINAL_PHI)
            for j in range(n_eta)
        ]
    )
    return GeometricSectors(eta_edges=eta_edges, phi_edges=phi_edges)


def _quantile_edges(
    values: np.ndarray, n: int, bounds: tuple[float, float], nominal: tuple[float, float]
) -> np.ndarray:
    """``n + 1`` edges: ``bounds`` outside, inner edges splitting ``values`` into ``n`` equal bins.

    Edge ``k`` lies between sorted values ``floor(k * m / n) - 1`` and ``floor(k * m / n)`` (of
    ``m``), so with ``side="right"`` look-ups bin ``k`` holds ``floor((k+1) m / n) - floor(k m /
    n)`` values: sizes differ by at most one. It sits at the midpoint, which is robust for hits
    not used in the fit, except where two values are too close for a float between them.
    """
    if values.size == 0:
        inner = np.linspace(nominal[0], nominal[1], n + 1)[1:-1]
    else:
        ordered = np.sort(values)
        upper = np.arange(1, n) * ordered.size // n
        above = ordered[upper]
        below = ordered[np.maximum(upper - 1, 0)]
        middle = 0.5 * (below + above)
        inner = np.where(middle > below, middle, above)
    return np.concatenate(([bounds[0]], inner, [bounds[1]]))


def _check_grid(grid: object) -> tuple[int, int]:
    try:
        n_phi, n_eta = grid  # type: ignore[misc]
    except (TypeError, ValueError):
        raise InputError(f"grid must be two integers (n_phi, n_eta) (got {grid!r})") from None
    for value in (n_phi, n_eta):
        if not isinstance(value, Integral) or isinstance(value, bool) or value < 1:
            raise InputError(f"grid must be two integers >= 1 (n_phi, n_eta) (got {grid!r})")
    return int(n_phi), int(n_eta)


def _check_n_parts(n_parts: object) -> None:
    if not isinstance(n_parts, Integral) or isinstance(n_parts, bool):
        raise InputError(f"parts must be an integer (got {n_parts!r})")
    if n_parts < 1:
        raise InputError(f"parts must be >= 1 (got {n_parts})")
