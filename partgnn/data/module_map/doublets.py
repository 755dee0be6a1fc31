"""The training doublets a module map is fitted to (``partgnn fit-module-map``): from events
files, or from events simulated on the fly (``--simulate SEED:FIRST:EVENTS``, in worker
processes, nothing written to disk), each source recorded by what it holds (its events'
provenance, ids and a digest of the doublets the fit read), not by where or when it was
written, so the same events give the same map file, byte for byte.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from partgnn.data.detector.geometry import DetectorGeometry, load_geometry
from partgnn.data.event import Event
from partgnn.data.graphs.graph_builder import module_doublets
from partgnn.data.module_map.map_file import EventDoublets
from partgnn.errors import InputError
from partgnn.worker_pool import ordered_map

#: The event attributes a source record keeps: what made the events, not when or where.
PROVENANCE_KEYS = ("source", "seed", "pileup", "config", "geometry")


@dataclass(frozen=True)
class SimulatedRun:
    """Events ``first_event_id .. first_event_id + events - 1`` of simulation seed ``seed``
    (``partgnn simulate --seed S --first-event-id F --events N`` makes the same events)."""

    seed: int
    first_event_id: int
    events: int

    @classmethod
    def parse(cls, text: str) -> SimulatedRun:
        """``"SEED:FIRST:EVENTS"``, e.g. ``"41:100000:2000"``.

        Raises:
            InputError: Not three non-negative integers (at least one event).
        """
        try:
            seed, first, events = (int(part) for part in text.split(":"))
        except ValueError:
            seed = first = events = -1
        if seed < 0 or first < 0 or events < 1:
            raise InputError(
                f"fit-module-map --simulate {text}: expected SEED:FIRST_EVENT_ID:EVENTS, "
                "non-negative integers and at least one event (e.g. 41:100000:2000)"
            )
        return cls(seed, first, events)

    def __str__(self) -> str:
        last = self.first_event_id + self.events - 1
        return f"seed {self.seed} events {self.first_event_id}..{last}"


class SourceRecord:
    """What one source gave the fit: its events' provenance (:data:`PROVENANCE_KEYS`, from the
    first event), their count and id range, and the SHA-256 of the doublets read from them."""

    def __init__(self) -> None:
        self._digest = hashlib.sha256()
        self.events = 0
        self.doublets = 0
        self._ids: list[int] = []
        self._provenance: dict[str, Any] | None = None

    def add(self, event_id: int, attrs: dict[str, Any], doublets: EventDoublets) -> None:
        """Counts one event's doublets
        (:func:`~partgnn.data.graphs.graph_builder.module_doublets`)."""
        if self._provenance is None:
            self._provenance = {k: _plain(attrs[k]) for k in PROVENANCE_KEYS if k in attrs}
        self._digest.update(np.int64(event_id).tobytes())
        for array in doublets:
            array = np.ascontiguousarray(array)
            self._digest.update(f"{array.dtype.str}{array.shape}".encode())
            self._digest.update(array.tobytes())
        self.events += 1
        self.doublets += len(doublets[0])
        self._ids.append(int(event_id))

    def as_dict(self) -> dict[str, Any]:
        """The record kept in the map's settings."""
        ids = self._ids or [0]
        return {
            "provenance": self._provenance or {},
            "events": self.events,
            "event_ids": [min(ids), max(ids)],
            "doublets_sha256": self._digest.hexdigest(),
        }


def file_doublets(
    path: Path,
    geometry: DetectorGeometry,
    *,
    pt_min: float,
    triplets: bool,
    max_vertex_radius: float | None = None,
) -> Iterator[tuple[int, dict[str, Any], EventDoublets]]:
    """``(event_id, attrs, doublets)`` of each event of an events file, in file order (the
    selection as :func:`~partgnn.data.graphs.graph_builder.module_doublets`)."""
    from partgnn.data.files.storage import EventFile

    with EventFile(path) as events:
        for event in events:
            found = module_doublets(event, geometry, pt_min=pt_min, triplets=triplets,
                                    max_vertex_radius=max_vertex_radius)  # fmt: skip
            yield event.event_id, event.attrs, found


def simulated_doublets(
    run: SimulatedRun,
    geometry_spec: str | None,
    *,
    pileup: float,
    pt_min: float,
    triplets: bool,
    max_vertex_radius: float | None = None,
    workers: int = 1,
    module_planes: bool = True,
    field_profile: bool = True,
    secondaries: bool = True,
) -> Iterator[tuple[int, dict[str, Any], EventDoublets]]:
    """``(event_id, attrs, doublets)`` of each event of ``run``, simulated with the default
    :class:`~partgnn.data.simulation.simulate.SimulationConfig` at ``pileup`` (what ``partgnn
    simulate`` writes; ``module_planes``, ``field_profile`` and ``secondaries`` as its options), in
    event order; ``workers`` processes simulate events side by side."""
    task = _SimulationTask(
        geometry_spec, pileup, pt_min, triplets, run.seed, module_planes, field_profile,
        secondaries, max_vertex_radius,
    )  # fmt: skip
    event_ids = range(run.first_event_id, run.first_event_id + run.events)
    yield from ordered_map(task, event_ids, n_items=run.events, workers=workers)


@dataclass(frozen=True)
class _SimulationTask:
    """One event simulated and reduced to its doublets (picklable for worker processes)."""

    geometry_spec: str | None
    pileup: float
    pt_min: float
    triplets: bool
    seed: int
    module_planes: bool = True
    field_profile: bool = True
    secondaries: bool = True
    max_vertex_radius: float | None = None

    def __call__(self, event_id: int) -> tuple[int, dict[str, Any], EventDoublets]:
        from partgnn.data.simulation.simulate import SimulationConfig, simulate_event

        geometry = _geometry(self.geometry_spec)
        event: Event = simulate_event(
            geometry,
            SimulationConfig(
                pileup=self.pileup,
                module_planes=self.module_planes,
                field_profile=self.field_profile,
                secondaries=self.secondaries,
            ),
            event_id=event_id,
            seed=self.seed,
        )
        found = module_doublets(event, geometry, pt_min=self.pt_min, triplets=self.triplets,
                                max_vertex_radius=self.max_vertex_radius)  # fmt: skip
        return event_id, event.attrs, found


_GEOMETRIES: dict[str | None, DetectorGeometry] = {}


def _geometry(spec: str | None) -> DetectorGeometry:
    """The geometry ``spec`` names, loaded once per process."""
    if spec not in _GEOMETRIES:
        _GEOMETRIES[spec] = load_geometry(spec)
    return _GEOMETRIES[spec]


def _plain(value: Any) -> Any:
    """A numpy scalar as its Python value (JSON-writable)."""
    return value.item() if isinstance(value, np.generic) else value
