"""Secondary particles from hadronic (nuclear) interactions in the detector's layers.

A hadron crossing a layer interacts inelastically with probability ``1 - exp(-t / L)``, where
``t`` is the material it traverses (:func:`~partgnn.data.simulation.propagation.traversed_material`,
in radiation lengths) and ``L`` the config's ``interaction_length`` in radiation lengths (silicon
alone: 46.52 cm / 9.37 cm = 4.96; the default 1.8 is an effective value for sensors plus the
supports and services the geometry does not list, chosen against the real sample's share of
displaced particles, with the V0 decays of :mod:`~partgnn.data.simulation.decays` that make the
rest). The interacting particle leaves its hit on that layer and stops; the interaction emits a
Poisson number (``secondary_multiplicity``) of charged products from the crossing point: knocked-out
protons (``secondary_proton_fraction``) and pions of either charge. The products share the
parent's momentum (Dirichlet fractions, so it is conserved among them), each at an angle to the
parent's direction from a transverse momentum drawn from an exponential (``secondary_pt_rel``,
the soft scale of hadronic interactions). Secondaries are followed like primaries, on the
outgoing branch of their helix (a product heading towards the beam line leaves hits only once it
turns outward); they do not interact again (one generation). Every secondary is listed in the
particle table with its production point as its vertex, so truth (and a target definition) can
tell it from a primary.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from partgnn.data.detector.geometry import DetectorGeometry
from partgnn.data.detector.magnetic_field import FieldProfile
from partgnn.data.simulation.particles import PARTICLE_ID_SHIFT, PION, PROTON, continued_ids
from partgnn.data.simulation.propagation import Crossings, traversed_material, with_propagated
from partgnn.data.simulation.simulation_config import SimulationConfig

#: Smallest secondary momentum [GeV]: below it a particle cannot reach the next layer anyway.
MIN_SECONDARY_P = 1e-3


@dataclass(frozen=True)
class Interactions:
    """Where primaries interacted: ``crossing (I,)`` indexes the crossing (the layer) each one
    interacted in; ``particle (I,)`` the interacting particle."""

    crossing: np.ndarray
    particle: np.ndarray


def interactions(
    geometry: DetectorGeometry,
    config: SimulationConfig,
    crossings: Crossings,
    rng: np.random.Generator,
) -> Interactions:
    """Draws the inelastic interactions of the propagated particles: at most one per particle,
    its first crossing whose draw interacts.

    Args:
        geometry: The detector (its layers' material).
        crossings: Every crossing of the particles, each particle's in path order.
        rng: Draws one uniform number per crossing.
    """
    material = np.array([layer.material for layer in geometry.layers])[crossings.layer]
    is_barrel = np.array([layer.is_barrel for layer in geometry.layers])[crossings.layer]
    thickness = traversed_material(crossings.momentum, crossings.position, material, is_barrel)
    probability = -np.expm1(-thickness / config.interaction_length)
    hit = np.flatnonzero(rng.random(len(crossings)) < probability)
    # Each particle's first interacting crossing in path order (crossings are grouped by
    # propagation step, so a particle's later crossings have larger indices).
    particle, first = np.unique(crossings.particle[hit], return_index=True)
    return Interactions(crossing=hit[first], particle=particle)


def absorbed(crossings: Crossings, found: Interactions) -> np.ndarray:
    """Which crossings come after their particle's interaction (the particle no longer exists
    there), shape ``(C,)`` bool."""
    stop = np.full(int(crossings.particle.max(initial=-1)) + 1, np.iinfo(np.int64).max)
    stop[found.particle] = found.crossing
    return np.arange(len(crossings)) > stop[crossings.particle]


def emit_secondaries(
    config: SimulationConfig,
    particles: dict[str, np.ndarray],
    crossings: Crossings,
    found: Interactions,
    rng: np.random.Generator,
) -> dict[str, np.ndarray]:
    """The charged secondaries of the interactions, as particle arrays (the keys of
    :func:`~partgnn.data.simulation.particles.generate_particles`); ids continue each parent
    collision's numbering after its primaries.

    Shapes: ``particles`` arrays over ``P`` primaries; returns arrays over ``S`` secondaries.
    """
    count = rng.poisson(config.secondary_multiplicity, len(found.crossing))
    source = np.repeat(found.crossing, count)
    n = len(source)
    parent_momentum = crossings.momentum[source]
    parent_p = np.linalg.norm(parent_momentum, axis=1)
    direction = parent_momentum / parent_p[:, None]
    # The products share the parent's momentum: Dirichlet(1, ..., 1) fractions, drawn as
    # exponentials normalised over each interaction's products.
    draw = rng.exponential(1.0, n)
    interaction = np.repeat(np.arange(len(count)), count)
    total = np.bincount(interaction, weights=draw, minlength=len(count))
    fraction = draw / total[interaction]
    p = np.maximum(fraction * parent_p, MIN_SECONDARY_P)
    # The angle to the parent: a transverse momentum drawn from an exponential of mean
    # secondary_pt_rel; beyond p itself the direction is isotropic in the forward hemisphere.
    pt_rel = rng.exponential(config.secondary_pt_rel, n)
    isotropic = rng.uniform(0.0, 1.0, n)  # cos(theta) uniform
    sin_theta = np.where(pt_rel < p, pt_rel / p, np.sqrt(1.0 - isotropic**2))
    cos_theta = np.sqrt(1.0 - sin_theta**2)
    azimuth = rng.uniform(-np.pi, np.pi, n)
    e1 = np.cross(direction, [0.0, 0.0, 1.0])
    e1 /= np.linalg.norm(e1, axis=1)[:, None]
    e2 = np.cross(direction, e1)
    unit = (
        cos_theta[:, None] * direction
        + (sin_theta * np.cos(azimuth))[:, None] * e1
        + (sin_theta * np.sin(azimuth))[:, None] * e2
    )
    momentum = p[:, None] * unit

    is_proton = rng.random(n) < config.secondary_proton_fraction
    charge = np.where(is_proton, 1, 2 * rng.integers(0, 2, n) - 1)
    pdg = np.where(is_proton, PROTON[0], PION[0])
    mass = np.where(is_proton, PROTON[1], PION[1])

    parent = crossings.particle[source]
    collision = particles["particle_id"][parent] >> PARTICLE_ID_SHIFT
    return {
        # Each collision's secondaries numbered after its primaries.
        "particle_id": continued_ids(particles["particle_id"], collision),
        "particle_type": charge * pdg,
        "q": charge,
        "mass": mass,
        "vertex": crossings.position[source],
        "momentum": momentum,
    }


def with_secondaries(
    geometry: DetectorGeometry,
    config: SimulationConfig,
    particles: dict[str, np.ndarray],
    crossings: Crossings,
    rng: np.random.Generator,
    field: FieldProfile | None = None,
) -> tuple[dict[str, np.ndarray], Crossings]:
    """The primaries' crossings up to their interactions, and the secondaries with theirs.

    Returns:
        The particle arrays, primaries first then secondaries (``P + S``), and the crossings of
        both (a secondary's ``particle`` index counts from ``P``).
    """
    found = interactions(geometry, config, crossings, rng)
    kept = ~absorbed(crossings, found)
    secondaries = emit_secondaries(config, particles, crossings, found, rng)
    return with_propagated(
        geometry, particles, crossings.selected(kept), secondaries,
        multiple_scattering=config.multiple_scattering, rng=rng, field=field,
    )  # fmt: skip
