"""TrackML-style event simulation: pile-up collisions, helices in a solenoid, hits on layers.

A fast, fully vectorised stand-in for the TrackML generator, so that realistic events of any
size can be made without the dataset; the result is an :class:`~partgnn.data.event.Event` with
exactly the TrackML columns, interchangeable with a real event.

The stages, each in its module: :mod:`~partgnn.data.simulation.particles` (the collisions' primary
particles), :mod:`~partgnn.data.simulation.propagation` (helices through the field, multiple
scattering),
:mod:`~partgnn.data.simulation.secondaries` (hadronic interactions in the layers, when switched on,
with
:mod:`~partgnn.data.simulation.decays`: the decays of neutral strange hadrons),
:mod:`~partgnn.data.simulation.digitisation` (overlaps, resolution, noise, modules), and
:mod:`~partgnn.data.simulation.cell_simulation` (each hit's cells, in a random stream of their own);
the settings are a
:class:`~partgnn.data.simulation.simulation_config.SimulationConfig`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from partgnn.data.detector.detector_modules import DetectorModules, detector_modules
from partgnn.data.detector.geometry import DetectorGeometry
from partgnn.data.detector.magnetic_field import FieldProfile
from partgnn.data.event import Event
from partgnn.data.simulation.cell_simulation import can_simulate_cells, simulate_clusters
from partgnn.data.simulation.decays import with_decays
from partgnn.data.simulation.digitisation import (
    assign_modules,
    noise_hits,
    overlap_hits,
    smear,
    smear_on_planes,
)
from partgnn.data.simulation.particles import generate_particles
from partgnn.data.simulation.propagation import propagate_particles
from partgnn.data.simulation.secondaries import with_secondaries
from partgnn.data.simulation.simulation_config import SimulationConfig
from partgnn.errors import InputError
from partgnn.worker_pool import ordered_map

__all__ = ["SimulationConfig", "simulate_event", "simulate_events"]

#: The third word of the seed of an event's cells' random stream (``(seed, event_id, 1)``).
CELLS_STREAM = 1


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
        as in TrackML files and numbered ``1..N``. On a geometry whose modules give thickness
        and pitch and whose layers a cell response, each hit's cluster is simulated too
        (:mod:`~partgnn.data.simulation.cell_simulation`; the event's ``clusters``).

    Raises:
        InputError: If the seed or event id is negative or the field is zero.
    """
    if seed < 0 or event_id < 0:
        raise InputError(f"simulation: seed and event_id must be >= 0 (got {seed}, {event_id})")
    if geometry.b_field == 0:
        raise InputError(f"geometry {geometry.name!r}: simulation needs a non-zero b_field")
    if config.field_profile and geometry.field_profile is None:
        raise InputError(
            f"geometry {geometry.name!r}: field_profile needs a geometry with a b_field_profile"
        )
    field = geometry.field_profile if config.field_profile else None
    rng = np.random.default_rng(np.random.SeedSequence([seed, event_id]))

    particles = generate_particles(config, rng)
    crossings = propagate_particles(
        geometry, particles, multiple_scattering=config.multiple_scattering, rng=rng, field=field
    )
    if config.secondaries:
        n_primaries = len(particles["q"])
        particles, crossings = with_secondaries(geometry, config, particles, crossings, rng, field)
        particles, crossings = with_decays(
            geometry, config, particles, n_primaries, crossings, rng, field
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
    modules = detector_modules(geometry) if config.module_planes else None
    if modules is not None:
        particle, layer, true_position, momentum, signal_module, measured = _on_module_planes(
            geometry, modules, config, particles["q"], particle, layer, true_position, momentum,
            rng, field,
        )  # fmt: skip
    else:
        overlap = overlap_hits(geometry, layer, true_position, momentum, config.overlap_scale,
                               rng)  # fmt: skip
        particle = np.concatenate([particle, particle[overlap.source]])
        layer = np.concatenate([layer, layer[overlap.source]])
        true_position = np.concatenate([true_position, overlap.position])
        momentum = np.concatenate([momentum, momentum[overlap.source]])
        second_module = np.arange(len(layer)) >= len(layer) - len(overlap.source)
        measured = smear(geometry, layer, true_position, config.resolution_scale, rng)

    noise_layer, noise_position = noise_hits(geometry, config, len(particle), rng)
    if modules is not None:
        noise_module = modules.assign(noise_layer, noise_position)
        noise_position = modules.onto_planes(noise_layer, noise_module, noise_position)
    n_noise = len(noise_layer)
    layer = np.concatenate([layer, noise_layer])
    measured = np.concatenate([measured, noise_position])
    true_position = np.concatenate([true_position, noise_position])
    momentum = np.concatenate([momentum, np.zeros((n_noise, 3))])
    # -1 marks noise until particle ids are looked up.
    particle = np.concatenate([particle, np.full(n_noise, -1)])
    if modules is not None:
        module = np.concatenate([signal_module, noise_module])
    else:
        second_module = np.concatenate([second_module, np.zeros(n_noise, dtype=bool)])
        module = assign_modules(
            geometry, layer, true_position, measured, second_module, overlap.source,
            config.module_size,
        )  # fmt: skip
    # Random order within a module, so that a hit's position in the file (e.g. noise appended
    # last) says nothing about its truth.
    order = np.lexsort((rng.random(len(layer)), module, layer))
    layer, module, particle = layer[order], module[order], particle[order]
    measured, true_position, momentum = measured[order], true_position[order], momentum[order]

    hits = _HitArrays(layer, module, particle, measured, true_position, momentum)
    event = _event(geometry, config, particles, hits, event_id=event_id, seed=seed)
    table = detector_modules(geometry)
    if can_simulate_cells(geometry, table):
        # Their own random stream: the hits are those of a simulation without cells.
        cells_rng = np.random.default_rng(np.random.SeedSequence([seed, event_id, CELLS_STREAM]))
        event.clusters = simulate_clusters(event, geometry, table, cells_rng)
        event.validate()
    return event


def _on_module_planes(
    geometry: DetectorGeometry,
    modules: DetectorModules,
    config: SimulationConfig,
    charge: np.ndarray,
    particle: np.ndarray,
    layer: np.ndarray,
    position: np.ndarray,
    momentum: np.ndarray,
    rng: np.random.Generator,
    field: FieldProfile | None = None,
) -> tuple[np.ndarray, ...]:
    """The hits of crossings of the layers' ideal surfaces on the module planes the tracks
    pass through (:meth:`DetectorModules.crossed`): the first module of each crossing, each
    further one with probability ``config.overlap_scale``; a crossing through no module (a
    gap between modules) leaves no hit. ``field``: the field the tracks bend in (``None``: the
    geometry's uniform one).

    Shapes: ``charge`` per particle; ``particle, layer (N,)``, ``position, momentum (N, 3)``.

    Returns:
        ``particle, layer, true position, momentum, module id, measured position`` per hit.
    """
    p = np.linalg.norm(momentum, axis=1)
    direction = momentum / p[:, None]
    # d direction / d path = 0.3 q B / p (direction x z) per metre (force q v x B, B along z).
    bz = geometry.b_field if field is None else field.at(position[:, 2])
    curvature = 0.3 * charge[particle] * bz / (p * 1000.0)
    bend = curvature[:, None] * np.cross(direction, [0.0, 0.0, 1.0])
    crossed = modules.crossed(layer, position, direction, bend)
    first = np.ones(len(crossed.source), dtype=bool)
    first[1:] = crossed.source[1:] != crossed.source[:-1]
    kept = first | (rng.random(len(first)) < config.overlap_scale)
    source = crossed.source[kept]
    true_position, rotation = crossed.position[kept], crossed.rotation[kept]
    measured = smear_on_planes(
        geometry, layer[source], true_position, rotation, config.resolution_scale, rng
    )
    return (particle[source], layer[source], true_position, momentum[source],
            crossed.module_id[kept], measured)  # fmt: skip


@dataclass(frozen=True)
class _HitArrays:
    """An event's hits in file order: ``layer, module, particle (N,)`` (``particle``: index in
    the particle arrays, -1 for noise), ``measured, true_position, momentum (N, 3)``."""

    layer: np.ndarray
    module: np.ndarray
    particle: np.ndarray
    measured: np.ndarray
    true_position: np.ndarray
    momentum: np.ndarray


def _event(
    geometry: DetectorGeometry,
    config: SimulationConfig,
    particles: dict[str, np.ndarray],
    arrays: _HitArrays,
    *,
    event_id: int,
    seed: int,
) -> Event:
    """The event's TrackML tables (hits, truth, particles), with the truth weights and hit
    counts, normalised and validated."""
    layer, module, particle = arrays.layer, arrays.module, arrays.particle
    measured, true_position, momentum = arrays.measured, arrays.true_position, arrays.momentum
    n_particles = len(particles["q"])
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
    workers: int = 1,
) -> Iterator[Event]:
    """Yields ``n_events`` events numbered from ``first_event_id``; see :func:`simulate_event`.

    Event ``k`` depends only on ``(seed, k)``, not on ``n_events``, ``first_event_id`` or
    ``workers`` (processes simulating events side by side; the events come in order).

    Raises:
        InputError: If ``n_events`` is negative (raised on the first ``next``).
    """
    if n_events < 0:
        raise InputError(f"simulation: n_events must be >= 0 (got {n_events})")
    event_ids = range(first_event_id, first_event_id + n_events)
    task = _SimulatedEvent(geometry, config, seed)
    yield from ordered_map(task, event_ids, n_items=n_events, workers=workers)


@dataclass(frozen=True)
class _SimulatedEvent:
    """:func:`simulate_event` of one event id (picklable for worker processes)."""

    geometry: DetectorGeometry
    config: SimulationConfig
    seed: int

    def __call__(self, event_id: int) -> Event:
        return simulate_event(self.geometry, self.config, event_id=event_id, seed=self.seed)
