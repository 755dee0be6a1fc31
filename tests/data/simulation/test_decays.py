"""Tests of the V0 decays (K0S -> pi+ pi-, Lambda -> p pi-) of the simulation."""

from __future__ import annotations

import numpy as np
import pytest

from partgnn.data.detector.geometry import default_geometry
from partgnn.data.simulation.decays import (
    KSHORT,
    LAMBDA,
    decay_daughters,
    transverse_mass_scaled,
    two_body_decay,
)
from partgnn.data.simulation.particles import PARTICLE_ID_SHIFT, PION, PROTON, generate_particles
from partgnn.data.simulation.simulate import SimulationConfig, simulate_event

GEOMETRY = default_geometry()


def _invariant_mass(p1, m1, p2, m2):
    e = np.sqrt((p1**2).sum(1) + m1**2) + np.sqrt((p2**2).sum(1) + m2**2)
    return np.sqrt(e**2 - ((p1 + p2) ** 2).sum(1))


def test_two_body_decays_conserve_momentum_and_mass():
    rng = np.random.default_rng(0)
    n = 1000
    momentum = rng.normal(0.0, 3.0, (n, 3))
    mass = np.where(rng.random(n) < 0.5, KSHORT[0], LAMBDA[0])
    mass_1 = np.where(mass == LAMBDA[0], PROTON[1], PION[1])
    mass_2 = np.full(n, PION[1])
    first, second = two_body_decay(momentum, mass, mass_1, mass_2, rng)
    np.testing.assert_allclose(first + second, momentum, atol=1e-9)
    np.testing.assert_allclose(_invariant_mass(first, mass_1, second, mass_2), mass, rtol=1e-9)


def test_a_fast_lambdas_proton_keeps_its_direction():
    """The Lambda's Q value is small: at 5 GeV the proton's angle to it is a few 10 mrad."""
    rng = np.random.default_rng(1)
    n = 2000
    momentum = np.tile([5.0, 0.0, 0.0], (n, 1))
    proton, _ = two_body_decay(
        momentum, np.full(n, LAMBDA[0]), np.full(n, PROTON[1]), np.full(n, PION[1]), rng
    )
    angle = np.arctan2(np.hypot(proton[:, 1], proton[:, 2]), proton[:, 0])
    assert np.quantile(angle, 0.9) < 0.03
    assert np.mean(np.linalg.norm(proton, axis=1)) > 0.7 * 5.0


def test_transverse_mass_scaling_keeps_the_kinetic_transverse_mass_and_the_direction():
    momentum = np.array([[0.5, 0.0, 1.0], [0.0, -2.0, -3.0]])
    mass = np.array([KSHORT[0], LAMBDA[0]])
    scaled = transverse_mass_scaled(momentum, mass)
    pt, pt_scaled = np.hypot(*momentum[:, :2].T), np.hypot(*scaled[:, :2].T)
    np.testing.assert_allclose(
        np.sqrt(pt_scaled**2 + mass**2) - mass, np.sqrt(pt**2 + PION[1] ** 2) - PION[1]
    )
    assert (pt_scaled > pt).all()  # heavier: harder
    np.testing.assert_allclose(scaled / pt_scaled[:, None], momentum / pt[:, None])


def test_decay_daughters_are_opposite_charged_pairs_from_points_inside_the_tracker():
    config = SimulationConfig(pileup=50, secondaries=True)
    rng = np.random.default_rng(2)
    primaries = generate_particles(config, rng)
    daughters = decay_daughters(GEOMETRY, config, primaries, len(primaries["q"]), rng)
    n = len(daughters["q"]) // 2
    # (0.05 x 0.692 + 0.04 x 0.639) per charged primary decay in a charged channel, nearly all
    # inside the tracker (flights of cm against a metre); Poisson counts of ~100
    expected = (0.05 * KSHORT[2] + 0.04 * LAMBDA[2]) * len(primaries["q"])
    assert 0.7 * expected < n < 1.3 * expected
    q = daughters["q"].reshape(n, 2)
    assert (q.sum(axis=1) == 0).all()
    types = set(np.abs(daughters["particle_type"]).tolist())
    assert types == {PION[0], PROTON[0]}
    vertex = daughters["vertex"].reshape(n, 2, 3)
    np.testing.assert_array_equal(vertex[:, 0], vertex[:, 1])
    radius = np.hypot(vertex[:, 0, 0], vertex[:, 0, 1])
    assert radius.max() < max(layer.r_max for layer in GEOMETRY.layers)
    assert np.median(radius) > 5.0  # displaced: cm flight distances
    ids = np.concatenate([primaries["particle_id"], daughters["particle_id"]])
    assert len(np.unique(ids)) == len(ids)
    # numbered after their collision's primaries
    collision = daughters["particle_id"] >> PARTICLE_ID_SHIFT
    for c in np.unique(collision)[:5]:
        last_primary = (primaries["particle_id"][primaries["particle_id"] >> PARTICLE_ID_SHIFT
                                                 == c] & 0xFFFFFF).max()  # fmt: skip
        assert ((daughters["particle_id"][collision == c] & 0xFFFFFF) > last_primary).all()


def test_no_v0s_no_daughters():
    config = SimulationConfig(pileup=20, secondaries=True, kshort_per_charged=0.0,
                              lambda_per_charged=0.0)  # fmt: skip
    rng = np.random.default_rng(3)
    primaries = generate_particles(config, rng)
    daughters = decay_daughters(GEOMETRY, config, primaries, len(primaries["q"]), rng)
    assert all(len(values) == 0 for values in daughters.values())


@pytest.mark.parametrize("seed", [5])
def test_v0_daughters_above_1_gev_point_back_near_the_beam_line(seed: int):
    """In an event with secondaries, the displaced (anti)protons above 1 GeV are Lambda daughters
    (interactions knock out protons, never antiprotons, and those share the parent's momentum):
    their momentum is within a few degrees of their position's direction, as the real sample's
    displaced targets are (issue 50)."""
    event = simulate_event(
        GEOMETRY, SimulationConfig(pileup=100, secondaries=True), event_id=0, seed=seed
    )
    p = event.particles
    pt = np.hypot(p["px"], p["py"])
    radius = np.hypot(p["vx"], p["vy"])
    antiprotons = (p["particle_type"] == -PROTON[0]) & (radius > 2.0) & (pt > 1.0)
    assert antiprotons.sum() >= 3
    dphi = np.arctan2(p["py"], p["px"]) - np.arctan2(p["vy"], p["vx"])
    dphi = np.abs((dphi + np.pi) % (2 * np.pi) - np.pi)[antiprotons]
    assert np.median(dphi) < 0.1
