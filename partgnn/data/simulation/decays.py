"""Weak decays of neutral strange hadrons (V0s): K0S -> pi+ pi-, Lambda -> p pi- (and the
anti-Lambda's charge conjugate).

Each collision makes a Poisson number of K0S and of Lambdas and anti-Lambdas (in equal numbers)
per charged primary (``kshort_per_charged``, ``lambda_per_charged``; ALICE measures in pp
collisions at the LHC 2 K0S / (pi+ + pi-) ~ 0.13 and (Lambda + anti-Lambda) / (pi+ + pi-) ~
0.05, Nature Phys. 13 (2017) 535, and ~79 % of the charged primaries are pions), with the
primaries' eta and phi and their pT spectrum moved to the V0's mass by transverse-mass scaling
(:func:`transverse_mass_scaled`). A V0 is neutral: it flies straight from its collision's vertex
for an exponential distance of mean ``beta gamma c tau`` and, in its charged channel (branching
fraction 69.2 % / 63.9 %), decays into two charged daughters, isotropic in its rest frame. The
daughters are displaced tracks that point back close to the beam line (small opening angles:
the proton of a Lambda keeps most of its momentum), unlike most products of hadronic
interactions (:mod:`~partgnn.data.simulation.secondaries`). V0s leave no hits and are not listed;
their daughters are listed with the decay point as their vertex and propagated like primaries (they
do not interact). Decays beyond the outermost layer are dropped.
"""

from __future__ import annotations

import numpy as np

from partgnn.data.detector.geometry import DetectorGeometry
from partgnn.data.detector.magnetic_field import FieldProfile
from partgnn.data.simulation.particles import (
    PARTICLE_ID_SHIFT,
    PION,
    PROTON,
    continued_ids,
    draw_momenta,
)
from partgnn.data.simulation.propagation import Crossings, with_propagated
from partgnn.data.simulation.simulation_config import SimulationConfig

#: (mass [GeV], c tau [mm], branching fraction to two charged daughters) of K0S and Lambda (PDG).
KSHORT = (0.497611, 26.844, 0.692)
LAMBDA = (1.115683, 78.9, 0.639)


def decay_daughters(
    geometry: DetectorGeometry,
    config: SimulationConfig,
    particles: dict[str, np.ndarray],
    n_primaries: int,
    rng: np.random.Generator,
) -> dict[str, np.ndarray]:
    """The charged daughters of the collisions' V0s that decay inside the tracker.

    Args:
        geometry: The detector (its outermost radius and |z|).
        config: ``kshort_per_charged``, ``lambda_per_charged`` and the primaries' spectrum.
        particles: The event's particles so far (primaries first): the ids to continue from.
        n_primaries: How many of them are primaries (their collisions, vertices and numbers
            set each collision's V0 count).
        rng: The event's random stream.

    Returns:
        Particle arrays (the keys of :func:`~partgnn.data.simulation.particles.generate_particles`)
        over the ``2 D`` daughters, each decay's two next to each other.
    """
    collision = particles["particle_id"][:n_primaries] >> PARTICLE_ID_SHIFT
    collisions, first, charged = np.unique(collision, return_index=True, return_counts=True)
    vertex_of = particles["vertex"][:n_primaries][first]
    n_kshort = rng.poisson(config.kshort_per_charged * charged)
    n_lambda = rng.poisson(config.lambda_per_charged * charged)
    kind = np.concatenate(
        [np.zeros(n_kshort.sum(), dtype=np.int64), np.ones(n_lambda.sum(), dtype=np.int64)]
    )
    parent = np.concatenate([np.repeat(np.arange(len(collisions)), n_kshort),
                             np.repeat(np.arange(len(collisions)), n_lambda)])  # fmt: skip
    anti = (kind == 1) & (rng.random(len(kind)) < 0.5)
    mass = np.where(kind == 0, KSHORT[0], LAMBDA[0])
    momentum = transverse_mass_scaled(draw_momenta(config, len(kind), rng), mass)
    c_tau = np.where(kind == 0, KSHORT[1], LAMBDA[1])
    branching = np.where(kind == 0, KSHORT[2], LAMBDA[2])
    p = np.linalg.norm(momentum, axis=1)
    flight = rng.exponential(1.0, len(kind)) * c_tau * p / mass
    decay_point = vertex_of[parent] + flight[:, None] * momentum / p[:, None]
    charged_channel = rng.random(len(kind)) < branching
    inside = _inside_tracker(geometry, decay_point)
    keep = charged_channel & inside
    kind, anti, parent = kind[keep], anti[keep], parent[keep]
    momentum, mass, decay_point = momentum[keep], mass[keep], decay_point[keep]

    # Daughter 1: pi+ (K0S), p (Lambda), anti-p (anti-Lambda); daughter 2: pi-, pi-, pi+.
    is_lambda = kind == 1
    mass_1 = np.where(is_lambda, PROTON[1], PION[1])
    mass_2 = np.full(len(kind), PION[1])
    first_momentum, second_momentum = two_body_decay(momentum, mass, mass_1, mass_2, rng)
    charge_1 = np.where(anti, -1, 1)
    type_1 = charge_1 * np.where(is_lambda, PROTON[0], PION[0])
    n = len(kind)
    interleave = np.empty(2 * n, dtype=np.int64)  # each decay's two daughters side by side
    interleave[0::2], interleave[1::2] = np.arange(n), np.arange(n, 2 * n)
    daughter_collision = np.repeat(collisions[parent], 2)
    return {
        "particle_id": continued_ids(particles["particle_id"], daughter_collision),
        "particle_type": np.concatenate([type_1, -charge_1 * PION[0]])[interleave],
        "q": np.concatenate([charge_1, -charge_1])[interleave],
        "mass": np.concatenate([mass_1, mass_2])[interleave],
        "vertex": np.repeat(decay_point, 2, axis=0),
        "momentum": np.concatenate([first_momentum, second_momentum])[interleave],
    }


def transverse_mass_scaled(momentum: np.ndarray, mass: np.ndarray) -> np.ndarray:
    """Momenta ``(D, 3)`` of the pions' spectrum moved to hadrons of ``mass (D,)`` [GeV] by
    transverse-mass scaling: the same ``m_T - m`` as a pion of that pT, the same eta and phi
    (heavier hadrons get harder pT spectra, as measured: mean pT ~0.45 GeV for pions, ~0.7 for
    K0S, ~0.9 for Lambdas)."""
    pt = np.hypot(momentum[:, 0], momentum[:, 1])
    kinetic = np.sqrt(pt**2 + PION[1] ** 2) - PION[1]
    scaled = np.sqrt((mass + kinetic) ** 2 - mass**2)
    return momentum * (scaled / pt)[:, None]


def two_body_decay(
    momentum: np.ndarray,
    mass: np.ndarray,
    mass_1: np.ndarray,
    mass_2: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Lab momenta of the two daughters of decays isotropic in the rest frame.

    Shapes: ``momentum (D, 3)`` [GeV]; ``mass, mass_1, mass_2 (D,)`` [GeV]; returns two
    ``(D, 3)`` arrays (they sum to ``momentum``).
    """
    p_star = np.sqrt((mass**2 - (mass_1 + mass_2) ** 2) * (mass**2 - (mass_1 - mass_2) ** 2))
    p_star /= 2 * mass
    cos_theta = rng.uniform(-1.0, 1.0, len(mass))
    phi = rng.uniform(-np.pi, np.pi, len(mass))
    sin_theta = np.sqrt(1.0 - cos_theta**2)
    rest = p_star[:, None] * np.stack(
        [sin_theta * np.cos(phi), sin_theta * np.sin(phi), cos_theta], axis=1
    )
    energy = np.sqrt(np.sum(momentum**2, axis=1) + mass**2)
    gamma = energy / mass
    axis = momentum / np.linalg.norm(momentum, axis=1)[:, None]

    def boosted(p: np.ndarray, m: np.ndarray) -> np.ndarray:
        e = np.sqrt(np.sum(p**2, axis=1) + m**2)
        along = np.sum(p * axis, axis=1)
        # p_lab = p + ((gamma - 1) p_along + gamma beta e) axis, with gamma beta = |P| / M.
        shift = (gamma - 1.0) * along + np.linalg.norm(momentum, axis=1) / mass * e
        return p + shift[:, None] * axis

    return boosted(rest, mass_1), boosted(-rest, mass_2)


def with_decays(
    geometry: DetectorGeometry,
    config: SimulationConfig,
    particles: dict[str, np.ndarray],
    n_primaries: int,
    crossings: Crossings,
    rng: np.random.Generator,
    field: FieldProfile | None = None,
) -> tuple[dict[str, np.ndarray], Crossings]:
    """The particles and crossings so far (the first ``n_primaries`` particles primaries),
    with the V0 daughters and theirs appended (a daughter's ``particle`` index counts from the
    particles so far)."""
    daughters = decay_daughters(geometry, config, particles, n_primaries, rng)
    return with_propagated(
        geometry, particles, crossings, daughters,
        multiple_scattering=config.multiple_scattering, rng=rng, field=field,
    )  # fmt: skip


def _inside_tracker(geometry: DetectorGeometry, point: np.ndarray) -> np.ndarray:
    """Whether each point ``(D, 3)`` lies within the outermost layers' radius and |z|."""
    r_max = max(layer.r_max for layer in geometry.layers)
    z_max = max(max(abs(layer.z_min), abs(layer.z_max)) for layer in geometry.layers)
    return (np.hypot(point[:, 0], point[:, 1]) < r_max) & (np.abs(point[:, 2]) < z_max)
