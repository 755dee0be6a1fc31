"""The primary particles of an event's pile-up collisions: counts, vertices, momenta, species."""

from __future__ import annotations

import numpy as np

from partgnn.data.simulation_config import SimulationConfig

#: Charged hadron species: (PDG id of the positive particle, mass [GeV]). The particle type of
#: a negative one is the negated id (pi-, K-, anti-proton).
PION, KAON, PROTON = (211, 0.13957039), (321, 0.493677), (2212, 0.93827209)

#: Bits of a particle id below the collision number: ``particle_id = collision << 24 | index``.
PARTICLE_ID_SHIFT = 24


def generate_particles(config: SimulationConfig, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Draws the primary particles of ``config.pileup`` collisions.

    Returns:
        Arrays over the ``P`` particles: ``particle_id (P,)``, ``particle_type (P,)``,
        ``q (P,)``, ``mass (P,)``, ``vertex (P, 3)`` [mm], ``momentum (P, 3)`` [GeV].
    """
    n_collisions = int(config.pileup)
    per_collision = rng.poisson(config.particles_per_pileup, n_collisions)
    n = int(per_collision.sum())
    collision = np.repeat(np.arange(n_collisions), per_collision)
    first = np.concatenate([[0], np.cumsum(per_collision)[:-1]])
    rank = np.arange(n) - first[collision]
    particle_id = ((collision + 1).astype(np.int64) << PARTICLE_ID_SHIFT) | (rank + 1)

    vertex = rng.normal(0.0, config.beam_spot_sigma, size=(n_collisions, 3))[collision]
    eta = rng.uniform(-config.eta_max, config.eta_max, n)
    phi = rng.uniform(-np.pi, np.pi, n)
    # Inverse of the truncated survival function S(pt) = ((1 + pt/p0) / (1 + pt_min/p0))^-m.
    survival = 1.0 - rng.random(n)  # in (0, 1], so pt is finite
    p0 = config.pt_scale
    pt = p0 * ((1 + config.pt_min / p0) * survival ** (-1.0 / config.pt_power) - 1)
    q = 2 * rng.integers(0, 2, n) - 1
    pion_fraction = 1.0 - config.kaon_fraction - config.proton_fraction
    species = rng.choice(3, size=n, p=[pion_fraction, config.kaon_fraction, config.proton_fraction])
    pdg = np.array([PION[0], KAON[0], PROTON[0]])[species]
    mass = np.array([PION[1], KAON[1], PROTON[1]])[species]
    momentum = np.stack([pt * np.cos(phi), pt * np.sin(phi), pt * np.sinh(eta)], 1)
    return {
        "particle_id": particle_id,
        "particle_type": q * pdg,
        "q": q,
        "mass": mass,
        "vertex": vertex,
        "momentum": momentum,
    }
