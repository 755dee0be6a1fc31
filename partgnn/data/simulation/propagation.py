"""Charged particles followed through the solenoid's field: helices from surface to surface, with
multiple scattering in each layer's material.

Glossary of the short names used below (units mm, GeV, tesla):

- ``pt``: transverse momentum; ``R``: transverse radius of the helix, ``1000 pt / (0.3 |B|)``;
- ``h``: turning sense, ``sign(q B)``; ``+1`` turns clockwise seen from +z (force ``q v x B``);
- ``(xc, yc)``: centre of the helix circle; ``d``: its distance from the beam line;
- ``alpha``: angle of the position seen from the centre; it changes by ``-h * tau`` as the
  particle moves, where ``tau`` is the turning angle (transverse path ``s = R * tau``);
- apex: the point of the circle farthest from the beam line (``alpha = beta``, the angle of the
  centre). Only the outgoing branch, from the vertex to the apex, is simulated.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from partgnn.data.detector.geometry import DetectorGeometry
from partgnn.data.detector.magnetic_field import FieldProfile

#: Below this cosine of the incidence angle the traversed material is capped, since real
#: modules are tilted and a grazing path length of 1/cos would be unphysically long.
MIN_COS_INCIDENCE = 0.1
#: A surface closer than this along the track [mm] is the one the particle sits on.
MIN_STEP = 1e-6
#: Smallest field magnitude [T] a step is a helix in (a field profile's zero: a radius of
#: 3 km at 1 GeV instead of a straight line).
MIN_FIELD = 1e-3


@dataclass(frozen=True)
class Crossings:
    """Where generated particles crossed detector layers, in the order they were found.

    Attributes:
        particle: Index of the crossing particle in the propagated arrays, shape ``(C,)``.
        layer: Index of the crossed layer in ``geometry.layers``, shape ``(C,)``.
        position: True crossing point ``(x, y, z)`` [mm], shape ``(C, 3)``.
        momentum: Momentum ``(px, py, pz)`` [GeV] on arrival (before the layer's scattering),
            shape ``(C, 3)``.
    """

    particle: np.ndarray
    layer: np.ndarray
    position: np.ndarray
    momentum: np.ndarray

    def __len__(self) -> int:
        return len(self.particle)

    def selected(self, mask: np.ndarray) -> Crossings:
        """The crossings where ``mask (C,)`` is true, in order."""
        return Crossings(self.particle[mask], self.layer[mask], self.position[mask],
                         self.momentum[mask])  # fmt: skip


def propagate(
    geometry: DetectorGeometry,
    *,
    vertices: np.ndarray,
    momenta: np.ndarray,
    charges: np.ndarray,
    masses: np.ndarray,
    multiple_scattering: bool = True,
    rng: np.random.Generator | None = None,
    field: FieldProfile | None = None,
) -> Crossings:
    """Follows helices through the detector and records every layer crossing.

    All particles advance together, one surface per iteration: from its current helix each
    particle finds the nearest surface ahead whose crossing lies inside the surface's extent
    (closed-form circle-circle intersection for barrel cylinders, a z plane for endcap disks),
    moves there, is recorded, and is deflected by the layer's material. A particle stops when
    no surface lies ahead before the apex of its circle (it curls up or leaves the detector),
    or when scattering turns it back towards the beam line. No energy loss is simulated.

    Args:
        geometry: The detector; ``b_field`` [T] along +z, non-zero.
        vertices: Start points [mm], shape ``(P, 3)``.
        momenta: Start momenta [GeV], shape ``(P, 3)``; ``pt`` must be > 0.
        charges: Charges in units of e (``+1``/``-1``), shape ``(P,)``.
        masses: Masses [GeV] (for the velocity in the Highland formula), shape ``(P,)``.
        multiple_scattering: Whether to apply Highland-formula kicks at each crossed layer.
        rng: Random generator for the kicks; required when ``multiple_scattering`` is on.
        field: ``Bz(|z|)`` instead of the uniform ``geometry.b_field``: each step from one
            surface to the next is a helix in the field at its midpoint (found from the helix
            in the field at its start); the radial component is neglected (pz is kept).

    Returns:
        The crossings, ``C`` of them, grouped by iteration (not by particle).
    """
    if multiple_scattering and rng is None:
        raise ValueError("propagate: multiple_scattering needs an rng")
    surfaces = _Surfaces.of(geometry)
    index = np.arange(len(charges))
    pos = np.array(vertices, dtype=np.float64).reshape(-1, 3).copy()
    mom = np.array(momenta, dtype=np.float64).reshape(-1, 3).copy()
    charge = np.asarray(charges, dtype=np.float64)
    mass = np.asarray(masses, dtype=np.float64)
    current = np.full(len(index), -1)
    found: list[tuple[np.ndarray, ...]] = []

    def field_at(z: np.ndarray) -> np.ndarray:
        if field is None:
            return np.full(len(z), float(geometry.b_field))
        bz = field.at(z)  # never 0: a helix of a very large radius instead of a line
        return np.where(bz >= 0, np.maximum(bz, MIN_FIELD), np.minimum(bz, -MIN_FIELD))

    # On the outgoing branch each surface is crossed at most once; the bound guards against a
    # kick that reverses pz in front of an endcap.
    for _ in range(2 * len(geometry.layers) + 1):
        if len(index) == 0:
            break
        bz = field_at(pos[:, 2])
        if field is not None:  # the field at the step's midpoint, found by the start's helix
            helix = _Helix.of(pos, mom, charge, bz)
            _, step = helix.next_surface(surfaces, current)
            moved = np.where(np.isfinite(step), step * helix.radius * helix.cot_theta, 0.0)
            bz = field_at(pos[:, 2] + 0.5 * moved)
        helix = _Helix.of(pos, mom, charge, bz)
        nearest, step = helix.next_surface(surfaces, current)

        # Move the survivors to their surface.
        keep = np.flatnonzero(np.isfinite(step))
        index, charge, mass, layer = index[keep], charge[keep], mass[keep], nearest[keep]
        step, radius, turn = step[keep], helix.radius[keep], helix.turn[keep]
        pt = np.hypot(mom[keep, 0], mom[keep, 1])
        alpha = helix.alpha0[keep] - turn * step
        psi = alpha - turn * (np.pi / 2)
        z = pos[keep, 2] + step * radius * helix.cot_theta[keep]
        xc, yc = helix.xc[keep], helix.yc[keep]
        pos = np.stack([xc + radius * np.cos(alpha), yc + radius * np.sin(alpha), z], 1)
        mom = np.stack([pt * np.cos(psi), pt * np.sin(psi), mom[keep, 2]], 1)
        # Snap onto the surface to remove rounding: barrels to their radius, disks to their z.
        is_barrel = surfaces.barrel[layer]
        layer_position = surfaces.position[layer]
        r = np.hypot(pos[:, 0], pos[:, 1])
        snap = np.where(is_barrel, layer_position / r, 1.0)
        pos[:, 0] *= snap
        pos[:, 1] *= snap
        pos[:, 2] = np.where(is_barrel, pos[:, 2], layer_position)
        found.append((index, layer, pos.copy(), mom.copy()))
        current = layer

        if multiple_scattering:
            mom = scatter(mom, pos, mass, surfaces.material[layer], is_barrel, rng)
            # A kick that turns the track towards the beam line puts it past its apex.
            outward = pos[:, 0] * mom[:, 0] + pos[:, 1] * mom[:, 1] > 0
            index, charge, mass, current = (
                index[outward],
                charge[outward],
                mass[outward],
                current[outward],
            )
            pos, mom = pos[outward], mom[outward]

    if not found:
        empty = np.zeros(0, dtype=np.int64)
        return Crossings(empty, empty, np.zeros((0, 3)), np.zeros((0, 3)))
    particle, layer, position, momentum = (
        np.concatenate(parts) for parts in zip(*found, strict=True)
    )
    return Crossings(particle=particle, layer=layer, position=position, momentum=momentum)


def propagate_particles(
    geometry: DetectorGeometry,
    particles: dict[str, np.ndarray],
    *,
    multiple_scattering: bool,
    rng: np.random.Generator,
    field: FieldProfile | None,
) -> Crossings:
    """:func:`propagate` of particle arrays as
    :func:`~partgnn.data.simulation.particles.generate_particles` makes them (``vertex``,
    ``momentum``, ``q``, ``mass``)."""
    return propagate(
        geometry,
        vertices=particles["vertex"],
        momenta=particles["momentum"],
        charges=particles["q"],
        masses=particles["mass"],
        multiple_scattering=multiple_scattering,
        rng=rng,
        field=field,
    )


def with_propagated(
    geometry: DetectorGeometry,
    particles: dict[str, np.ndarray],
    crossings: Crossings,
    new: dict[str, np.ndarray],
    *,
    multiple_scattering: bool,
    rng: np.random.Generator,
    field: FieldProfile | None,
) -> tuple[dict[str, np.ndarray], Crossings]:
    """``new`` particles (secondaries, decay daughters) propagated and appended: the particle
    arrays ``P + N`` and ``crossings`` followed by the new ones' (their ``particle`` index
    counts from ``P``)."""
    born = propagate_particles(
        geometry, new, multiple_scattering=multiple_scattering, rng=rng, field=field
    )
    offset = len(particles["q"])
    merged = {key: np.concatenate([particles[key], new[key]]) for key in particles}
    joined = Crossings(
        particle=np.concatenate([crossings.particle, born.particle + offset]),
        layer=np.concatenate([crossings.layer, born.layer]),
        position=np.concatenate([crossings.position, born.position]),
        momentum=np.concatenate([crossings.momentum, born.momentum]),
    )
    return merged, joined


@dataclass(frozen=True)
class _Surfaces:
    """The layers as the helix stepping needs them: barrel cylinders and endcap disks."""

    barrel: np.ndarray
    position: np.ndarray
    material: np.ndarray
    b_index: np.ndarray
    b_radius: np.ndarray
    b_zmin: np.ndarray
    b_zmax: np.ndarray
    d_index: np.ndarray
    d_z: np.ndarray
    d_r2min: np.ndarray
    d_r2max: np.ndarray

    @classmethod
    def of(cls, geometry: DetectorGeometry) -> _Surfaces:
        layers = geometry.layers
        barrel = np.array([la.is_barrel for la in layers])
        b_index, d_index = np.flatnonzero(barrel), np.flatnonzero(~barrel)
        return cls(
            barrel=barrel,
            position=np.array([la.position for la in layers]),
            material=np.array([la.material for la in layers]),
            b_index=b_index,
            b_radius=np.array([layers[i].position for i in b_index]),
            b_zmin=np.array([layers[i].z_min for i in b_index]),
            b_zmax=np.array([layers[i].z_max for i in b_index]),
            d_index=d_index,
            d_z=np.array([layers[i].position for i in d_index]),
            d_r2min=np.array([layers[i].r_min for i in d_index]) ** 2,
            d_r2max=np.array([layers[i].r_max for i in d_index]) ** 2,
        )


@dataclass(frozen=True)
class _Helix:
    """Each particle's helix in a field along z: turning sense, radius, centre, the angle of
    its position seen from the centre, ``pz / pt`` and the start's z (shapes ``(P,)``)."""

    turn: np.ndarray
    radius: np.ndarray
    xc: np.ndarray
    yc: np.ndarray
    alpha0: np.ndarray
    cot_theta: np.ndarray
    z: np.ndarray

    @classmethod
    def of(cls, pos: np.ndarray, mom: np.ndarray, charge: np.ndarray, bz: np.ndarray) -> _Helix:
        pt = np.hypot(mom[:, 0], mom[:, 1])
        turn = np.sign(charge * bz)
        radius = 1000.0 * pt / (0.3 * np.abs(bz))
        direction = np.arctan2(mom[:, 1], mom[:, 0])
        xc = pos[:, 0] + turn * radius * np.sin(direction)
        yc = pos[:, 1] - turn * radius * np.cos(direction)
        alpha0 = np.arctan2(pos[:, 1] - yc, pos[:, 0] - xc)
        return cls(turn, radius, xc, yc, alpha0, mom[:, 2] / pt, pos[:, 2])

    def next_surface(
        self, surfaces: _Surfaces, current: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The nearest surface ahead of each particle (other than ``current``, the one it sits
        on; -1: none) and the turning angle to it (``inf``: none before the apex)."""
        turn, radius, cot_theta = self.turn, self.radius, self.cot_theta
        beta = np.arctan2(self.yc, self.xc)
        d = np.hypot(self.xc, self.yc)
        tau_apex = np.mod(turn * (self.alpha0 - beta), 2 * np.pi)
        z0 = self.z

        # Barrel cylinders: |centre + R e(alpha)| = rho  <=>  cos(alpha - beta) = c; on the
        # outgoing branch alpha - beta = h (tau_apex - tau), so tau = tau_apex - arccos(c).
        cos_angle = (surfaces.b_radius**2 - d[:, None] ** 2 - radius[:, None] ** 2) / (
            2 * radius[:, None] * d[:, None]
        )
        with np.errstate(invalid="ignore"):
            tau_b = tau_apex[:, None] - np.arccos(cos_angle)
        z_b = z0[:, None] + tau_b * radius[:, None] * cot_theta[:, None]
        ok_b = (
            (tau_b * radius[:, None] > MIN_STEP) & (z_b >= surfaces.b_zmin)
            & (z_b <= surfaces.b_zmax)
        )  # fmt: skip

        # Endcap disks: z is linear in the path; the disk must come before the apex and the
        # crossing radius r^2 = d^2 + R^2 + 2 R d cos(tau_apex - tau) within the disk.
        # A track with pz = 0 gives s = +-inf (never reaches a disk); that masks itself out.
        with np.errstate(divide="ignore", invalid="ignore"):
            s_d = (surfaces.d_z - z0[:, None]) / cot_theta[:, None]
            tau_d = s_d / radius[:, None]
            r2_d = (
                d[:, None] ** 2
                + radius[:, None] ** 2
                + 2 * radius[:, None] * d[:, None] * np.cos(tau_apex[:, None] - tau_d)
            )
        ok_d = (
            (s_d > MIN_STEP) & (tau_d <= tau_apex[:, None]) & (r2_d >= surfaces.d_r2min)
            & (r2_d <= surfaces.d_r2max)
        )  # fmt: skip

        tau = np.full((len(turn), len(surfaces.barrel)), np.inf)
        tau[:, surfaces.b_index] = np.where(ok_b, tau_b, np.inf)
        tau[:, surfaces.d_index] = np.where(ok_d, tau_d, np.inf)
        on_surface = current >= 0
        tau[on_surface, current[on_surface]] = np.inf
        nearest = np.argmin(tau, axis=1)
        return nearest, tau[np.arange(len(turn)), nearest]


def traversed_material(
    mom: np.ndarray, pos: np.ndarray, material: np.ndarray, is_barrel: np.ndarray
) -> np.ndarray:
    """The material a crossing traverses [radiation lengths]: the layer's thickness at normal
    incidence over the cosine of the incidence angle (at least :data:`MIN_COS_INCIDENCE`).

    Shapes: ``mom, pos (N, 3)``; ``material, is_barrel (N,)``; returns ``(N,)``.
    """
    unit = mom / np.linalg.norm(mom, axis=1)[:, None]
    r = np.hypot(pos[:, 0], pos[:, 1])
    normal_component = np.where(
        is_barrel, (pos[:, 0] * unit[:, 0] + pos[:, 1] * unit[:, 1]) / r, unit[:, 2]
    )
    return material / np.maximum(np.abs(normal_component), MIN_COS_INCIDENCE)


def scatter(
    mom: np.ndarray,
    pos: np.ndarray,
    mass: np.ndarray,
    material: np.ndarray,
    is_barrel: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """Deflects momenta by two independent Gaussian angles (Highland formula), keeping |p|.

    Shapes: ``mom, pos (N, 3)``; ``mass, material, is_barrel (N,)``.
    """
    p = np.linalg.norm(mom, axis=1)
    unit = mom / p[:, None]
    thickness = traversed_material(mom, pos, material, is_barrel)
    beta = p / np.sqrt(p**2 + mass**2)
    with np.errstate(divide="ignore", invalid="ignore"):
        theta0 = (
            0.0136 / (beta * p) * np.sqrt(thickness) * (1 + 0.038 * np.log(thickness / beta**2))
        )
    theta0 = np.where(thickness > 0, theta0, 0.0)
    # Orthonormal frame around the direction; pt > 0 keeps z x u non-zero.
    e1 = np.stack([-unit[:, 1], unit[:, 0], np.zeros(len(p))], 1)
    e1 /= np.linalg.norm(e1, axis=1)[:, None]
    e2 = np.cross(unit, e1)
    angles = rng.normal(size=(len(p), 2)) * theta0[:, None]
    new = unit + np.tan(angles[:, :1]) * e1 + np.tan(angles[:, 1:]) * e2
    return new * (p / np.linalg.norm(new, axis=1))[:, None]
