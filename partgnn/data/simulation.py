"""TrackML-style event simulation: pile-up collisions, helices in a solenoid, hits on layers.

A fast, fully vectorised stand-in for the TrackML generator, so that realistic events of any
size can be made without the dataset; the result is an :class:`~partgnn.data.event.Event` with
exactly the TrackML columns, interchangeable with a real event.

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

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from partgnn.data.detector_modules import detector_modules
from partgnn.data.event import Event
from partgnn.data.geometry import DetectorGeometry
from partgnn.errors import InputError

#: Charged hadron species: (PDG id of the positive particle, mass [GeV]). The particle type of
#: a negative one is the negated id (pi-, K-, anti-proton).
PION, KAON, PROTON = (211, 0.13957039), (321, 0.493677), (2212, 0.93827209)

# Below this cosine of the incidence angle the traversed material is capped, since real modules
# are tilted and a grazing path length of 1/cos would be unphysically long.
_MIN_COS_INCIDENCE = 0.1
# A surface closer than this along the track (mm) is the one the particle sits on.
_MIN_STEP = 1e-6
# Bits of a particle id below the collision number: ``particle_id = collision << 24 | index``.
_PARTICLE_ID_SHIFT = 24


@dataclass(frozen=True)
class SimulationConfig:
    """What to simulate.

    Attributes:
        pileup: Number of proton-proton collisions per event (a whole number >= 1); each has its
            own vertex drawn from the beam spot.
        particles_per_pileup: Mean number of charged particles per collision within
            ``|eta| < eta_max``; the count per collision is Poisson.
        eta_max: Particles are generated uniformly in pseudorapidity ``[-eta_max, eta_max]``.
        pt_min: Smallest transverse momentum generated [GeV].
        pt_scale: ``p0`` of the transverse momentum spectrum [GeV] (see ``pt_power``).
        pt_power: ``m`` of the spectrum: the fraction of particles above ``pt`` falls as
            ``(1 + pt / p0) ** -m`` (truncated at ``pt_min``). The defaults reproduce the real
            TrackML sample event: pT percentiles 10/50/90/99% of about 0.14/0.35/1.2/3.3 GeV.
        kaon_fraction: Fraction of particles that are charged kaons (the rest: pions, protons).
        proton_fraction: Fraction of particles that are (anti-)protons. The defaults follow the
            real sample event (79% pions, 7% kaons, 14% protons).
        beam_spot_sigma: Gaussian spread of each collision vertex in ``(x, y, z)`` [mm].
        noise_fraction: Expected fraction of noise hits among all hits (real sample: 15%).
        multiple_scattering: Whether each crossed layer deflects the track (Highland formula).
        resolution_scale: Multiplies every layer's hit resolution; 0 gives perfect hits.
        efficiency: Hit efficiency for every layer; ``None`` uses each layer's own.
        module_size: Size ``(along r*phi, along z or r)`` [mm] of the pseudo modules that
            number the hits (``module_id``) when the geometry has no module table
            (:attr:`~partgnn.data.geometry.DetectorGeometry.modules`; the default TrackML
            geometry has one: hits carry the real detector's module ids); see
            :func:`module_ids`.
        overlap_scale: Multiplies every layer's probability of a second hit on an overlapping
            module (:attr:`~partgnn.data.geometry.Layer.overlap`, measured on the real sample);
            0 turns overlapping modules off.
    """

    pileup: float = 200.0
    particles_per_pileup: float = 50.0
    eta_max: float = 4.0
    pt_min: float = 0.1
    pt_scale: float = 1.0
    pt_power: float = 3.4
    kaon_fraction: float = 0.07
    proton_fraction: float = 0.14
    beam_spot_sigma: tuple[float, float, float] = (0.015, 0.015, 55.0)
    noise_fraction: float = 0.15
    multiple_scattering: bool = True
    resolution_scale: float = 1.0
    efficiency: float | None = None
    module_size: tuple[float, float] = (30.0, 80.0)
    overlap_scale: float = 1.0

    def __post_init__(self) -> None:
        # Accept lists (YAML, JSON) for the tuple fields, so configs round-trip through JSON.
        object.__setattr__(self, "beam_spot_sigma", tuple(float(s) for s in self.beam_spot_sigma))
        object.__setattr__(self, "module_size", tuple(float(s) for s in self.module_size))
        problems = [
            (self.pileup < 1 or self.pileup != int(self.pileup), "pileup", "a whole number >= 1"),
            # The upper bound keeps the per-collision particle number within its id bits.
            (
                not 0 < self.particles_per_pileup <= 1e6,
                "particles_per_pileup",
                "in (0, 1e6]",
            ),
            (not self.eta_max > 0, "eta_max", "> 0"),
            (not self.pt_min > 0, "pt_min", "> 0"),
            (not self.pt_scale > 0, "pt_scale", "> 0"),
            (not self.pt_power > 0, "pt_power", "> 0"),
            (not 0 <= self.kaon_fraction <= 1, "kaon_fraction", "in [0, 1]"),
            (not 0 <= self.proton_fraction <= 1, "proton_fraction", "in [0, 1]"),
            (
                self.kaon_fraction + self.proton_fraction > 1,
                "kaon_fraction + proton_fraction",
                "<= 1",
            ),
            (
                len(self.beam_spot_sigma) != 3 or min(self.beam_spot_sigma) < 0,
                "beam_spot_sigma",
                "three values >= 0",
            ),
            (not 0 <= self.noise_fraction < 1, "noise_fraction", "in [0, 1)"),
            (not self.resolution_scale >= 0, "resolution_scale", ">= 0"),
            (
                self.efficiency is not None and not 0 <= self.efficiency <= 1,
                "efficiency",
                "None or in [0, 1]",
            ),
            (
                len(self.module_size) != 2 or not min(self.module_size) > 0,
                "module_size",
                "two values > 0",
            ),
            (not 0 <= self.overlap_scale <= 10, "overlap_scale", "in [0, 10]"),
        ]
        for bad, name, expected in problems:
            if bad:
                value = getattr(self, name, None)
                got = f" (got {value!r})" if value is not None else ""
                raise InputError(f"simulation config: {name} must be {expected}{got}")

    def to_json(self) -> str:
        """The configuration as a JSON object (sorted keys), for provenance attributes."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


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


def simulate_event(
    geometry: DetectorGeometry, config: SimulationConfig, *, event_id: int, seed: int
) -> Event:
    """Simulates one event: pile-up collisions, helix propagation, digitisation, noise.

    The random stream is derived from ``(seed, event_id)`` only, so an event is the same
    whichever batch it is simulated in.

    Truth conventions: ``tx, ty, tz`` is the true crossing point (for noise, the hit itself),
    ``tpx, tpy, tpz`` the particle momentum there (0 for noise). ``weight`` is uniform over the
    hits of particles with at least 3 hits and sums to 1 over the event (0 for noise and for
    particles with fewer hits). Particle ids are ``(collision + 1) << 24 | (k + 1)`` for the
    ``k``-th particle of a collision; ``nhits`` counts the hits a particle left.

    Args:
        geometry: The detector; its ``b_field`` must be non-zero.
        config: What to simulate.
        event_id: The event number (also seeds the event).
        seed: The run's seed (a non-negative integer).

    Returns:
        A normalised, validated event. Hits are sorted by ``(volume_id, layer_id, module_id)``
        as in TrackML files and numbered ``1..N``.

    Raises:
        InputError: If the seed or event id is negative or the field is zero.
    """
    if seed < 0 or event_id < 0:
        raise InputError(f"simulation: seed and event_id must be >= 0 (got {seed}, {event_id})")
    if geometry.b_field == 0:
        raise InputError(f"geometry {geometry.name!r}: simulation needs a non-zero b_field")
    rng = np.random.default_rng(np.random.SeedSequence([seed, event_id]))

    particles = _generate_particles(config, rng)
    crossings = propagate(
        geometry,
        vertices=particles["vertex"],
        momenta=particles["momentum"],
        charges=particles["q"],
        masses=particles["mass"],
        multiple_scattering=config.multiple_scattering,
        rng=rng,
    )

    efficiency = np.array(
        [
            layer.efficiency if config.efficiency is None else config.efficiency
            for layer in geometry.layers
        ]
    )
    seen = rng.random(len(crossings)) < efficiency[crossings.layer]
    particle = crossings.particle[seen]
    layer = crossings.layer[seen]
    true_position = crossings.position[seen]
    momentum = crossings.momentum[seen]
    overlap = _overlap_hits(geometry, layer, true_position, momentum, config.overlap_scale, rng)
    particle = np.concatenate([particle, particle[overlap.source]])
    layer = np.concatenate([layer, layer[overlap.source]])
    true_position = np.concatenate([true_position, overlap.position])
    momentum = np.concatenate([momentum, momentum[overlap.source]])
    second_module = np.arange(len(layer)) >= len(layer) - len(overlap.source)
    measured = _smear(geometry, layer, true_position, config.resolution_scale, rng)

    noise_layer, noise_position = _noise_hits(geometry, config, len(particle), rng)
    n_noise = len(noise_layer)
    layer = np.concatenate([layer, noise_layer])
    measured = np.concatenate([measured, noise_position])
    true_position = np.concatenate([true_position, noise_position])
    momentum = np.concatenate([momentum, np.zeros((n_noise, 3))])
    n_particles = len(particles["q"])
    # -1 marks noise until particle ids are looked up.
    particle = np.concatenate([particle, np.full(n_noise, -1)])
    second_module = np.concatenate([second_module, np.zeros(n_noise, dtype=bool)])

    modules = detector_modules(geometry)
    if modules is None:
        module = module_ids(geometry, layer, measured, config.module_size, second=second_module)
    else:
        first = ~second_module
        module = np.zeros(len(layer), dtype=np.int64)
        module[first] = modules.assign(layer[first], true_position[first])
        module[second_module] = modules.assign(
            layer[second_module], true_position[second_module], exclude=module[overlap.source]
        )
    # Random order within a module, so that a hit's position in the file (e.g. noise appended
    # last) says nothing about its truth.
    order = np.lexsort((rng.random(len(layer)), module, layer))
    layer, module, particle = layer[order], module[order], particle[order]
    measured, true_position, momentum = measured[order], true_position[order], momentum[order]

    is_signal = particle >= 0
    nhits = np.bincount(particle[is_signal], minlength=n_particles)
    scored = is_signal & (nhits[np.where(is_signal, particle, 0)] >= 3)
    weight = np.where(scored, 1.0 / max(int(scored.sum()), 1), 0.0)
    particle_id = particles["particle_id"]
    hit_particle_id = np.where(is_signal, particle_id[np.where(is_signal, particle, 0)], 0)

    hit_id = np.arange(1, len(layer) + 1, dtype=np.int64)
    volume_ids = np.array([la.volume_id for la in geometry.layers], dtype=np.int64)
    layer_ids = np.array([la.layer_id for la in geometry.layers], dtype=np.int64)
    hits = pd.DataFrame(
        {
            "hit_id": hit_id,
            "x": measured[:, 0],
            "y": measured[:, 1],
            "z": measured[:, 2],
            "volume_id": volume_ids[layer],
            "layer_id": layer_ids[layer],
            "module_id": module,
        }
    )
    truth = pd.DataFrame(
        {
            "hit_id": hit_id,
            "particle_id": hit_particle_id,
            "tx": true_position[:, 0],
            "ty": true_position[:, 1],
            "tz": true_position[:, 2],
            "tpx": momentum[:, 0],
            "tpy": momentum[:, 1],
            "tpz": momentum[:, 2],
            "weight": weight,
        }
    )
    vertex, p = particles["vertex"], particles["momentum"]
    particle_table = pd.DataFrame(
        {
            "particle_id": particle_id,
            "particle_type": particles["particle_type"],
            "vx": vertex[:, 0],
            "vy": vertex[:, 1],
            "vz": vertex[:, 2],
            "px": p[:, 0],
            "py": p[:, 1],
            "pz": p[:, 2],
            "q": particles["q"],
            "nhits": nhits,
        }
    )
    event = Event(
        event_id=event_id,
        hits=hits,
        truth=truth,
        particles=particle_table,
        attrs={
            "source": "simulation",
            "seed": int(seed),
            "pileup": float(config.pileup),
            "config": config.to_json(),
            "geometry": geometry.name,
        },
    ).normalized()
    event.validate()
    return event


def simulate_events(
    geometry: DetectorGeometry,
    config: SimulationConfig,
    *,
    n_events: int,
    seed: int,
    first_event_id: int = 0,
) -> Iterator[Event]:
    """Yields ``n_events`` events numbered from ``first_event_id``; see :func:`simulate_event`.

    Event ``k`` depends only on ``(seed, k)``, not on ``n_events`` or ``first_event_id``.

    Raises:
        InputError: If ``n_events`` is negative (raised on the first ``next``).
    """
    if n_events < 0:
        raise InputError(f"simulation: n_events must be >= 0 (got {n_events})")
    for event_id in range(first_event_id, first_event_id + n_events):
        yield simulate_event(geometry, config, event_id=event_id, seed=seed)


def propagate(
    geometry: DetectorGeometry,
    *,
    vertices: np.ndarray,
    momenta: np.ndarray,
    charges: np.ndarray,
    masses: np.ndarray,
    multiple_scattering: bool = True,
    rng: np.random.Generator | None = None,
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

    Returns:
        The crossings, ``C`` of them, grouped by iteration (not by particle).
    """
    if multiple_scattering and rng is None:
        raise ValueError("propagate: multiple_scattering needs an rng")
    layers = geometry.layers
    n_layers = len(layers)
    barrel = np.array([la.is_barrel for la in layers])
    b_index, d_index = np.flatnonzero(barrel), np.flatnonzero(~barrel)
    b_radius = np.array([layers[i].position for i in b_index])
    b_zmin = np.array([layers[i].z_min for i in b_index])
    b_zmax = np.array([layers[i].z_max for i in b_index])
    d_z = np.array([layers[i].position for i in d_index])
    d_r2min = np.array([layers[i].r_min for i in d_index]) ** 2
    d_r2max = np.array([layers[i].r_max for i in d_index]) ** 2
    material = np.array([la.material for la in layers])
    surface_position = np.array([la.position for la in layers])
    b_field = geometry.b_field

    index = np.arange(len(charges))
    pos = np.array(vertices, dtype=np.float64).reshape(-1, 3).copy()
    mom = np.array(momenta, dtype=np.float64).reshape(-1, 3).copy()
    turn = np.sign(np.asarray(charges, dtype=np.float64) * b_field)
    mass = np.asarray(masses, dtype=np.float64)
    current = np.full(len(index), -1)
    found: list[tuple[np.ndarray, ...]] = []

    # On the outgoing branch each surface is crossed at most once; the bound guards against a
    # kick that reverses pz in front of an endcap.
    for _ in range(2 * n_layers + 1):
        if len(index) == 0:
            break
        pt = np.hypot(mom[:, 0], mom[:, 1])
        radius = 1000.0 * pt / (0.3 * abs(b_field))
        direction = np.arctan2(mom[:, 1], mom[:, 0])
        xc = pos[:, 0] + turn * radius * np.sin(direction)
        yc = pos[:, 1] - turn * radius * np.cos(direction)
        alpha0 = np.arctan2(pos[:, 1] - yc, pos[:, 0] - xc)
        beta = np.arctan2(yc, xc)
        d = np.hypot(xc, yc)
        tau_apex = np.mod(turn * (alpha0 - beta), 2 * np.pi)
        cot_theta = mom[:, 2] / pt

        # Barrel cylinders: |centre + R e(alpha)| = rho  <=>  cos(alpha - beta) = c; on the
        # outgoing branch alpha - beta = h (tau_apex - tau), so tau = tau_apex - arccos(c).
        cos_angle = (b_radius**2 - d[:, None] ** 2 - radius[:, None] ** 2) / (
            2 * radius[:, None] * d[:, None]
        )
        with np.errstate(invalid="ignore"):
            tau_b = tau_apex[:, None] - np.arccos(cos_angle)
        z_b = pos[:, 2, None] + tau_b * radius[:, None] * cot_theta[:, None]
        ok_b = (tau_b * radius[:, None] > _MIN_STEP) & (z_b >= b_zmin) & (z_b <= b_zmax)

        # Endcap disks: z is linear in the path; the disk must come before the apex and the
        # crossing radius r^2 = d^2 + R^2 + 2 R d cos(tau_apex - tau) within the disk.
        # A track with pz = 0 gives s = +-inf (never reaches a disk); that masks itself out.
        with np.errstate(divide="ignore", invalid="ignore"):
            s_d = (d_z - pos[:, 2, None]) / cot_theta[:, None]
            tau_d = s_d / radius[:, None]
            r2_d = (
                d[:, None] ** 2
                + radius[:, None] ** 2
                + 2 * radius[:, None] * d[:, None] * np.cos(tau_apex[:, None] - tau_d)
            )
        ok_d = (
            (s_d > _MIN_STEP) & (tau_d <= tau_apex[:, None]) & (r2_d >= d_r2min) & (r2_d <= d_r2max)
        )

        tau = np.full((len(index), n_layers), np.inf)
        tau[:, b_index] = np.where(ok_b, tau_b, np.inf)
        tau[:, d_index] = np.where(ok_d, tau_d, np.inf)
        on_surface = current >= 0
        tau[on_surface, current[on_surface]] = np.inf
        nearest = np.argmin(tau, axis=1)
        step = tau[np.arange(len(index)), nearest]
        alive = np.isfinite(step)

        # Move the survivors to their surface.
        keep = np.flatnonzero(alive)
        index, turn, mass, layer = index[keep], turn[keep], mass[keep], nearest[keep]
        step, radius, pt = step[keep], radius[keep], pt[keep]
        alpha = alpha0[keep] - turn * step
        psi = alpha - turn * (np.pi / 2)
        z = pos[keep, 2] + step * radius * cot_theta[keep]
        pos = np.stack([xc[keep] + radius * np.cos(alpha), yc[keep] + radius * np.sin(alpha), z], 1)
        mom = np.stack([pt * np.cos(psi), pt * np.sin(psi), mom[keep, 2]], 1)
        # Snap onto the surface to remove rounding: barrels to their radius, disks to their z.
        is_barrel = barrel[layer]
        layer_position = surface_position[layer]
        r = np.hypot(pos[:, 0], pos[:, 1])
        snap = np.where(is_barrel, layer_position / r, 1.0)
        pos[:, 0] *= snap
        pos[:, 1] *= snap
        pos[:, 2] = np.where(is_barrel, pos[:, 2], layer_position)
        found.append((index, layer, pos.copy(), mom.copy()))
        current = layer

        if multiple_scattering:
            mom = _scatter(mom, pos, mass, material[layer], is_barrel, rng)
            # A kick that turns the track towards the beam line puts it past its apex.
            outward = pos[:, 0] * mom[:, 0] + pos[:, 1] * mom[:, 1] > 0
            index, turn, mass, current = (
                index[outward],
                turn[outward],
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


def module_ids(
    geometry: DetectorGeometry,
    layer: np.ndarray,
    position: np.ndarray,
    module_size: tuple[float, float] = (30.0, 80.0),
    *,
    second: np.ndarray | None = None,
) -> np.ndarray:
    """Deterministic pseudo module numbers from a regular grid on each layer (for a geometry
    without a module table; the TrackML geometry's hits take its real modules:
    :mod:`partgnn.data.detector_modules`).

    A layer is cut into ``n_phi`` equal phi sectors (``round(2 pi r_ref / width)``, at least 1;
    ``r_ref`` is the barrel radius or the disk's outer radius) and ``n_v`` equal bins along z
    (barrel) or r (disk) of about ``length`` each. ``module_id = 1 + i_v * n_phi + i_phi``,
    with ``i_phi`` counted from phi = -pi and ``i_v`` from ``z_min`` or ``r_min``; positions just
    outside the extent go to the edge bin.

    Args:
        geometry: The detector.
        layer: Layer index of each hit, shape ``(N,)``.
        position: Hit positions ``(x, y, z)`` [mm], shape ``(N, 3)``.
        module_size: ``(width along r*phi, length along z or r)`` [mm].
        second: Whether each hit is on the second, overlapping module plane of its layer,
            shape ``(N,)``; those modules are numbered after the first plane's
            (``+ n_phi * n_v``).

    Returns:
        Module numbers, shape ``(N,)``, dtype int64, from 1.
    """
    width, length = module_size
    layers = geometry.layers
    r_ref = np.array([la.position if la.is_barrel else la.r_max for la in layers])
    v_min = np.array([la.z_min if la.is_barrel else la.r_min for la in layers])
    v_span = np.array(
        [(la.z_max - la.z_min) if la.is_barrel else (la.r_max - la.r_min) for la in layers]
    )
    n_phi = np.maximum(1, np.round(2 * np.pi * r_ref / width)).astype(np.int64)
    n_v = np.maximum(1, np.ceil(v_span / length)).astype(np.int64)
    barrel = np.array([la.is_barrel for la in layers])

    r = np.hypot(position[:, 0], position[:, 1])
    phi = np.arctan2(position[:, 1], position[:, 0])
    v = np.where(barrel[layer], position[:, 2], r)
    i_phi = np.clip(np.floor((phi + np.pi) / (2 * np.pi) * n_phi[layer]), 0, n_phi[layer] - 1)
    i_v = np.clip(
        np.floor((v - v_min[layer]) / v_span[layer].clip(1e-9) * n_v[layer]), 0, n_v[layer] - 1
    )
    module = 1 + i_v.astype(np.int64) * n_phi[layer] + i_phi.astype(np.int64)
    if second is not None:
        module = module + np.where(second, (n_phi * n_v)[layer], 0)
    return module


@dataclass(frozen=True)
class _OverlapHits:
    """Second hits on overlapping modules: ``source (M,)`` indexes the crossing each comes from,
    ``position (M, 3)`` is its true position [mm]."""

    source: np.ndarray
    position: np.ndarray


def _overlap_hits(
    geometry: DetectorGeometry,
    layer: np.ndarray,
    position: np.ndarray,
    momentum: np.ndarray,
    scale: float,
    rng: np.random.Generator,
) -> _OverlapHits:
    """Draws which crossings also hit the overlapping neighbour module, and where.

    With probability ``scale * layer.overlap`` a crossing leaves a second hit, on a module plane
    ``layer.overlap_offset`` further out along the layer's normal (r on a barrel, |z| on a
    disk); the track is followed there in a straight line (over a few mm its curvature is
    negligible) and the path is capped at grazing incidence.

    Shapes: ``layer (N,)``, ``position, momentum (N, 3)``.
    """
    layers = geometry.layers
    probability = np.clip(scale * np.array([la.overlap for la in layers]), 0.0, 1.0)
    offset = np.array([la.overlap_offset for la in layers])
    barrel = np.array([la.is_barrel for la in layers])[layer]
    source = np.flatnonzero(rng.random(len(layer)) < probability[layer])
    pos, mom = position[source], momentum[source]
    unit = mom / np.linalg.norm(mom, axis=1, keepdims=True)
    step = offset[layer[source]]
    # Path length t to the second plane. Barrel: |(x, y) + t (ux, uy)| = r + offset, the
    # positive root of a t^2 + 2 b t + c = 0; disk: |z| grows by offset.
    a = unit[:, 0] ** 2 + unit[:, 1] ** 2
    b = pos[:, 0] * unit[:, 0] + pos[:, 1] * unit[:, 1]
    r = np.hypot(pos[:, 0], pos[:, 1])
    c = r**2 - (r + step) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        barrel_path = (-b + np.sqrt(b**2 - a * c)) / a
        disk_path = step / np.abs(unit[:, 2])
    path = np.where(barrel[source], barrel_path, disk_path)
    # Grazing tracks would travel far in the module's plane: cap the path as the material is.
    path = np.minimum(np.nan_to_num(path, nan=0.0), step / _MIN_COS_INCIDENCE)
    return _OverlapHits(source=source, position=pos + path[:, None] * unit)


def _generate_particles(
    config: SimulationConfig, rng: np.random.Generator
) -> dict[str, np.ndarray]:
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
    particle_id = ((collision + 1).astype(np.int64) << _PARTICLE_ID_SHIFT) | (rank + 1)

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


def _scatter(
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
    r = np.hypot(pos[:, 0], pos[:, 1])
    normal_component = np.where(
        is_barrel, (pos[:, 0] * unit[:, 0] + pos[:, 1] * unit[:, 1]) / r, unit[:, 2]
    )
    thickness = material / np.maximum(np.abs(normal_component), _MIN_COS_INCIDENCE)
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


def _smear(
    geometry: DetectorGeometry,
    layer: np.ndarray,
    position: np.ndarray,
    scale: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Gaussian resolution in local coordinates: r*phi and z (barrel), r*phi and r (disk).

    Shapes: ``layer (N,)``, ``position (N, 3)`` -> measured positions ``(N, 3)``.
    """
    layers = geometry.layers
    sigma = scale * np.array([la.resolution for la in layers], dtype=np.float64).reshape(-1, 2)
    barrel = np.array([la.is_barrel for la in layers], dtype=bool)[layer]
    noise = rng.normal(size=(len(layer), 2)) * sigma[layer]
    r = np.hypot(position[:, 0], position[:, 1])
    phi = np.arctan2(position[:, 1], position[:, 0]) + noise[:, 0] / r
    r = np.where(barrel, r, r + noise[:, 1])
    z = np.where(barrel, position[:, 2] + noise[:, 1], position[:, 2])
    return np.stack([r * np.cos(phi), r * np.sin(phi), z], 1)


def _noise_hits(
    geometry: DetectorGeometry,
    config: SimulationConfig,
    n_signal: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Noise hits with a uniform density over the whole sensitive area.

    Their count is Poisson with mean ``n_signal * f / (1 - f)``, so that on average a fraction
    ``f = config.noise_fraction`` of all hits is noise. Each lands on a layer with probability
    proportional to its area, at a uniform phi, uniform z (barrel) or uniform r^2 (disk).

    Returns:
        Layer indices ``(M,)`` and positions ``(M, 3)`` [mm].
    """
    f = config.noise_fraction
    n = int(rng.poisson(n_signal * f / (1 - f))) if n_signal > 0 else 0
    layers = geometry.layers
    area = np.array(
        [
            2 * np.pi * la.position * (la.z_max - la.z_min)
            if la.is_barrel
            else np.pi * (la.r_max**2 - la.r_min**2)
            for la in layers
        ]
    )
    layer = rng.choice(len(layers), size=n, p=area / area.sum())
    barrel = np.array([la.is_barrel for la in layers])[layer]
    lo = np.array([la.z_min if la.is_barrel else la.r_min**2 for la in layers])[layer]
    hi = np.array([la.z_max if la.is_barrel else la.r_max**2 for la in layers])[layer]
    position = np.array([la.position for la in layers])[layer]
    v = rng.uniform(lo, hi)
    phi = rng.uniform(-np.pi, np.pi, n)
    # v is r^2 on disks; abs() keeps sqrt quiet on the barrel rows it does not select.
    r = np.where(barrel, position, np.sqrt(np.abs(v)))
    z = np.where(barrel, v, position)
    return layer, np.stack([r * np.cos(phi), r * np.sin(phi), z], 1).reshape(-1, 3)
