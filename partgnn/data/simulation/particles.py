"""The primary particles of an event's pile-up collisions: counts, vertices, momenta, species."""

from __future__ import annotations

import numpy as np

from partgnn.data.simulation.simulation_config import SimulationConfig

#: Charged hadron species: (PDG id of the positive particle, mass [GeV]). The particle type of
#: a negative one is the negated id (pi-, K-, anti-proton).
PION, KAON, PROTON = (211, 0.13957039), (321, 0.493677), (2212, 0.93827209)

#: Bits of a particle id below the collision number: ``particle_id = collision << 24 | index``.
PARTICLE_ID_SHIFT = 24


def generate_particles(config: SimulationConfig, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Draws the primary particles of ``config.pileup`` collisions
    (:attr:`~partgnn.data.simulation.simulation_config.SimulationConfig.primaries_per_pileup` each).

    Returns:
        Arrays over the ``P`` particles: ``particle_id (P,)``, ``particle_type (P,)``,
        ``q (P,)``, ``mass (P,)``, ``vertex (P, 3)`` [mm], ``momentum (P, 3)`` [GeV].
    """
    n_collisions = int(config.pileup)
    per_collision = rng.poisson(config.primaries_per_pileup, n_collisions)
    n = int(per_collision.sum())
    collision = np.repeat(np.arange(n_collisions), per_collision)
    first = np.concatenate([[0], np.cumsum(per_collision)[:-1]])
    rank = np.arange(n) - first[collision]
    particle_id = ((collision + 1).astype(np.int64) << PARTICLE_ID_SHIFT) | (rank + 1)

    vertex = rng.normal(0.0, config.beam_spot_sigma, size=(n_collisions, 3))[collision]
    momentum = draw_momenta(config, n, rng)
    q = 2 * rng.integers(0, 2, n) - 1
    pion_fraction = 1.0 - config.kaon_fraction - config.proton_fraction
    species = rng.choice(3, size=n, p=[pion_fraction, config.kaon_fraction, config.proton_fraction])
    pdg = np.array([PION[0], KAON[0], PROTON[0]])[species]
    mass = np.array([PION[1], KAON[1], PROTON[1]])[species]
    return {
        "particle_id": particle_id,
        "particle_type": q * pdg,
        "q": q,
        "mass": mass,
        "vertex": vertex,
        "momentum": momentum,
    }


def draw_momenta(config: SimulationConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    """Momenta ``(n, 3)`` [GeV] of the primaries' spectrum: eta uniform in
    ``[-eta_max, eta_max]``, phi uniform, pT from a power law above ``pt_min``."""
    eta = rng.uniform(-config.eta_max, config.eta_max, n)
    phi = rng.uniform(-np.pi, np.pi, n)
    # Inverse of the truncated survival function S(pt) = ((1 + pt/p0) / (1 + pt_min/p0))^-m.
    survival = 1.0 - rng.random(n)  # in (0, 1], so pt is finite
    p0 = config.pt_scale
    pt = p0 * ((1 + config.pt_min / p0) * survival ** (-1.0 / config.pt_power) - 1)
    return np.stack([pt * np.cos(phi), pt * np.sin(phi), pt * np.sinh(eta)], 1)


def continued_ids(particle_id: np.ndarray, collision: np.ndarray) -> np.ndarray:
    """Ids for new particles of the given collisions, numbered after each collision's particles.

    Args:
        particle_id: The event's particle ids so far, shape ``(P,)``.
        collision: The collision (the id's upper bits, ``particle_id >> PARTICLE_ID_SHIFT``) of
            each new particle, shape ``(S,)``.

    Returns:
        ``(S,)`` ids: a collision's new particles take the numbers after its largest so far, in
        their order.
    """
    size = int(max(particle_id.max(initial=0) >> PARTICLE_ID_SHIFT, collision.max(initial=0))) + 1
    last = np.zeros(size, dtype=np.int64)
    np.maximum.at(
        last, particle_id >> PARTICLE_ID_SHIFT, particle_id & ((1 << PARTICLE_ID_SHIFT) - 1)
    )
    order = np.argsort(collision, kind="stable")
    rank = np.empty(len(collision), dtype=np.int64)
    sorted_collision = collision[order]
    start = np.searchsorted(sorted_collision, sorted_collision, side="left")
    rank[order] = np.arange(len(collision)) - start
    return (collision << PARTICLE_ID_SHIFT) | (last[collision] + rank + 1)
