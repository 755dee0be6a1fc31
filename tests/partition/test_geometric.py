"""Tests of partgnn.partition.geometric: phi wedges, eta slices, phi x eta grids of hits."""

from __future__ import annotations

import math

import numpy as np
import pytest

from partgnn.errors import InputError
from partgnn.partition.geometric import (
    GeometricSectors,
    default_grid,
    fit_sectors,
    geometric_partition,
    sector_coordinates,
    sector_grid,
)

METHODS = ("phi", "eta", "phieta")


def cylinder_hits(n_hits: int, seed: int) -> np.ndarray:
    """Hits spread over a TrackML-sized cylinder, shape ``(n_hits, 3)`` in mm."""
    rng = np.random.default_rng(seed)
    r = rng.uniform(30.0, 1000.0, n_hits)
    phi = rng.uniform(-math.pi, math.pi, n_hits)
    z = rng.uniform(-3000.0, 3000.0, n_hits)
    return np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=1)


def hits_at(phi: np.ndarray, eta: np.ndarray, r: float = 100.0) -> np.ndarray:
    """Hits at radius ``r`` with the given phi and eta, shape ``(N, 3)``."""
    return np.stack([r * np.cos(phi), r * np.sin(phi), r * np.sinh(eta)], axis=1)


@pytest.mark.parametrize(
    ("n_parts", "grid"),
    [(1, (1, 1)), (2, (2, 1)), (4, (2, 2)), (6, (3, 2)), (7, (7, 1)), (8, (4, 2)), (9, (3, 3))],
)
def test_default_grid_is_the_most_square_with_more_wedges(
    n_parts: int, grid: tuple[int, int]
) -> None:
    assert default_grid(n_parts) == grid


def test_sector_grid_of_each_method() -> None:
    assert sector_grid("phi", 6) == (6, 1)
    assert sector_grid("eta", 6) == (1, 6)
    assert sector_grid("phieta", 6) == (3, 2)
    assert sector_grid("phieta", 6, grid=(2, 3)) == (2, 3)


def test_coordinates_of_known_points() -> None:
    pos = np.array(
        [
            [10.0, 0.0, 0.0],  # phi 0, eta 0
            [0.0, 10.0, 10.0 * math.sinh(1.0)],  # phi pi/2, eta 1
            [-10.0, 0.0, -10.0 * math.sinh(2.0)],  # phi pi, eta -2
            [0.0, 0.0, 5.0],  # on the beam line: finite eta
            [0.0, 0.0, 0.0],  # at the origin
        ]
    )
    phi, eta = sector_coordinates(pos)
    np.testing.assert_allclose(phi[:3], [0.0, math.pi / 2, math.pi])
    np.testing.assert_allclose(eta[:3], [0.0, 1.0, -2.0], atol=1e-12)
    assert np.isfinite(eta[3]) and 20.0 < eta[3] < 30.0
    assert eta[4] == 0.0


def test_phi_wedges_follow_phi_order() -> None:
    # 8 hits in phi order from -pi to pi: 4 wedges take them two by two.
    phi = np.linspace(-math.pi + 0.1, math.pi - 0.1, 8)
    pos = hits_at(phi[::-1], np.zeros(8))
    assert geometric_partition(pos, 4, "phi").tolist() == [3, 3, 2, 2, 1, 1, 0, 0]


def test_phieta_grid_numbers_wedges_within_slices() -> None:
    # Slice 0 (eta < 0) and slice 1 (eta > 0), each with one hit per quadrant.
    phi = np.tile([-2.5, -1.0, 0.5, 2.0], 2)
    eta = np.repeat([-1.0, 1.0], 4)
    part = geometric_partition(hits_at(phi, eta), 8, "phieta")
    assert part.tolist() == list(range(8))
    part = geometric_partition(hits_at(phi, eta), 4, "phieta", grid=(2, 2))
    assert part.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("n_parts", range(1, 9))
def test_sectors_are_balanced_in_hits(method: str, n_parts: int) -> None:
    pos = cylinder_hits(10_000, seed=n_parts)
    part = geometric_partition(pos, n_parts, method)
    assert part.shape == (10_000,) and part.dtype == np.int64
    counts = np.bincount(part, minlength=n_parts)
    assert counts.size == n_parts
    # Quantile boundaries: sizes differ by one, or two for a grid (one in eta, one in phi).
    assert counts.max() - counts.min() <= (2 if method == "phieta" else 1)


def assert_ordered_bins(value: np.ndarray, bins: np.ndarray, n_bins: int) -> None:
    """Every value of bin ``k`` is below every value of bin ``k + 1``."""
    for k in range(n_bins - 1):
        assert value[bins == k].max() < value[bins == k + 1].min()


@pytest.mark.parametrize("method", ["phi", "eta"])
def test_wedges_and_slices_are_contiguous_ranges(method: str) -> None:
    pos = cylinder_hits(2000, seed=5)
    phi, eta = sector_coordinates(pos)
    assert_ordered_bins(phi if method == "phi" else eta, geometric_partition(pos, 4, method), 4)


def test_grid_sectors_are_wedges_within_slices() -> None:
    pos = cylinder_hits(2000, seed=5)
    phi, eta = sector_coordinates(pos)
    part = geometric_partition(pos, 6, "phieta")  # 3 x 2
    assert_ordered_bins(eta, part // 3, 2)
    for eta_slice in range(2):
        in_slice = part // 3 == eta_slice
        assert_ordered_bins(phi[in_slice], part[in_slice] % 3, 3)


@pytest.mark.parametrize("method", METHODS)
def test_permuting_hits_permutes_the_parts(method: str) -> None:
    # Boundaries depend on the set of hits only, never on their order or on any randomness.
    pos = cylinder_hits(3000, seed=2)
    order = np.random.default_rng(0).permutation(3000)
    part = geometric_partition(pos, 6, method)
    assert np.array_equal(geometric_partition(pos[order], 6, method), part[order])
    assert np.array_equal(geometric_partition(pos, 6, method), part)


def test_fitted_sectors_reproduce_the_partition_and_apply_to_other_hits() -> None:
    pos = cylinder_hits(5000, seed=3)
    sectors = fit_sectors(pos, (4, 2))
    assert sectors.grid == (4, 2) and sectors.n_parts == 8
    assert np.array_equal(sectors.assign(pos), geometric_partition(pos, 8, "phieta"))
    assert sectors.eta_edges.shape == (3,) and sectors.phi_edges.shape == (2, 5)
    assert sectors.eta_edges[0] == -math.inf and sectors.eta_edges[-1] == math.inf
    np.testing.assert_array_equal(sectors.phi_edges[:, 0], -math.pi)
    np.testing.assert_array_equal(sectors.phi_edges[:, -1], math.pi)
    assert (np.diff(sectors.phi_edges, axis=1) > 0).all()
    with pytest.raises(ValueError, match="read-only"):
        sectors.phi_edges[0, 1] = 0.0
    # Hits of another event from the same distribution land in roughly equal sectors.
    counts = np.bincount(sectors.assign(cylinder_hits(5000, seed=4)), minlength=8)
    assert counts.min() > 0.8 * 5000 / 8


def test_sectors_from_explicit_boundaries() -> None:
    sectors = GeometricSectors(
        eta_edges=[-math.inf, 0.0, math.inf],
        phi_edges=[[-math.pi, math.pi], [-math.pi, math.pi]],
    )
    assert sectors.grid == (1, 2)
    part = sectors.assign(hits_at(np.array([0.0, 1.0]), np.array([-0.5, 0.5])))
    assert part.tolist() == [0, 1]


def test_torch_positions_give_the_same_parts() -> None:
    torch = pytest.importorskip("torch")
    pos = cylinder_hits(500, seed=6)
    for method in METHODS:
        assert np.array_equal(
            geometric_partition(torch.from_numpy(pos).float(), 4, method),
            geometric_partition(pos.astype(np.float32), 4, method),
        )


@pytest.mark.parametrize("method", METHODS)
def test_no_hits(method: str) -> None:
    part = geometric_partition(np.zeros((0, 3)), 4, method)
    assert part.shape == (0,) and part.dtype == np.int64
    sectors = fit_sectors(np.zeros((0, 3)), (2, 2))
    np.testing.assert_allclose(sectors.eta_edges[1:-1], [0.0])
    np.testing.assert_allclose(sectors.phi_edges[:, 1], [0.0, 0.0])


@pytest.mark.parametrize("method", METHODS)
def test_more_parts_than_hits(method: str) -> None:
    part = geometric_partition(cylinder_hits(3, seed=7), 8, method)
    assert part.min() >= 0 and part.max() < 8
    assert np.bincount(part, minlength=8).max() <= (2 if method == "phieta" else 1)


@pytest.mark.parametrize("method", METHODS)
def test_identical_hits_share_a_sector(method: str) -> None:
    part = geometric_partition(np.tile([[10.0, 20.0, 30.0]], (50, 1)), 4, method)
    assert len(set(part.tolist())) == 1 and 0 <= part[0] < 4


@pytest.mark.parametrize(
    ("pos", "message"),
    [
        (np.zeros((4, 2)), "pos must have shape (N, 3) (got (4, 2))"),
        (np.zeros(3), "pos must have shape (N, 3) (got (3,))"),
        (np.array([[0.0, 1.0, np.nan], [1.0, 0.0, np.inf]]), "pos has 2 non-finite values"),
        (np.array([["a", "b", "c"]]), "pos must hold numbers (got <U1)"),
    ],
)
def test_bad_positions(pos: np.ndarray, message: str) -> None:
    with pytest.raises(InputError) as info:
        geometric_partition(pos, 2, "phi")
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("method", "n_parts", "grid", "message"),
    [
        ("phi", 0, None, "parts must be >= 1 (got 0)"),
        ("eta", 1.5, None, "parts must be an integer (got 1.5)"),
        ("metis", 2, None, "unknown geometric method 'metis' (choose phi, eta, phieta)"),
        ("phi", 8, (4, 2), "a sector grid applies to method 'phieta' only (got method 'phi')"),
        ("phieta", 8, (3, 2), "grid 3x2 has 6 sectors, not parts = 8"),
        ("phieta", 8, (8, 0), "grid must be two integers >= 1 (n_phi, n_eta) (got (8, 0))"),
        ("phieta", 8, (8,), "grid must be two integers (n_phi, n_eta) (got (8,))"),
        ("phieta", 8, 8, "grid must be two integers (n_phi, n_eta) (got 8)"),
    ],
)
def test_bad_arguments(method: str, n_parts: object, grid: object, message: str) -> None:
    with pytest.raises(InputError) as info:
        geometric_partition(cylinder_hits(10, seed=0), n_parts, method, grid=grid)
    assert str(info.value) == message


def test_bad_explicit_boundaries() -> None:
    with pytest.raises(InputError, match=r"phi_edges must have shape \(n_eta, n_phi \+ 1\)"):
        GeometricSectors(eta_edges=[-math.inf, 0.0, math.inf], phi_edges=[[-math.pi, math.pi]])
    with pytest.raises(InputError, match=r"eta_edges must have shape"):
        GeometricSectors(eta_edges=[0.0], phi_edges=np.zeros((0, 2)))
    with pytest.raises(InputError, match=r"must be non-decreasing"):
        GeometricSectors(eta_edges=[-math.inf, math.inf], phi_edges=[[-math.pi, 1.0, 0.5, math.pi]])
