"""A module map file fitted from events files and simulated runs: what ``partgnn fit-module-map``
does, as one library call.

The training doublets come from :mod:`partgnn.data.module_map.doublets` (each source recorded by
what it holds), the fit from :func:`~partgnn.data.module_map.fit.fit_module_map`; the map records
its settings, its sources and its events, and is written atomically.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from partgnn.data.detector.geometry import load_geometry
from partgnn.data.module_map.doublets import (
    SimulatedRun,
    SourceRecord,
    file_doublets,
    simulated_doublets,
)
from partgnn.data.module_map.fit import fit_module_map
from partgnn.data.module_map.map_file import EventDoublets, ModuleMap
from partgnn.errors import InputError


@dataclass(frozen=True)
class MapFit:
    """How a module map is fitted: which doublets it learns from and how wide its windows are.

    Attributes:
        pt_min: Learn from the doublets of particles above this pT [GeV].
        triplets: Fit triplet windows too.
        max_vertex_radius: Learn only from particles made within this radius [mm] of the beam
            line (``None``: every particle).
        window: ``minmax`` or ``rms`` (:func:`~partgnn.data.module_map.fit.fit_module_map`).
        width: The windows' widening (``window``'s meaning).
        floor: Widen every window by this share of the median width, one value or one per
            window feature.
        triplet_floor: The same for the triplet windows.
        precision: ``float32`` rounds the windows outward to float32 (what a float32 reader
            such as ACTS holds); ``float64`` keeps them.
    """

    pt_min: float = 0.0
    triplets: bool = False
    max_vertex_radius: float | None = None
    window: Literal["minmax", "rms"] = "minmax"
    width: float = 0.0
    floor: float | Sequence[float] = 0.0
    triplet_floor: float = 0.0
    precision: Literal["float32", "float64"] = "float64"


@dataclass(frozen=True)
class SimulatedEvents:
    """The events simulated on the fly for a fit (nothing written to disk).

    Attributes:
        runs: The runs (``SEED:FIRST:EVENTS`` each).
        pileup: Their pile-up.
        workers: Processes simulating side by side (the map is the same for any number).
        module_planes, field_profile, secondaries: The simulation's realism
            (:class:`~partgnn.data.simulation.simulate.SimulationConfig`).
    """

    runs: Sequence[SimulatedRun] = field(default_factory=tuple)
    pileup: float = 200.0
    workers: int = 1
    module_planes: bool = True
    field_profile: bool = True
    secondaries: bool = True


@dataclass
class FittedMap:
    """What :func:`fit_module_map_file` made.

    Attributes:
        module_map: The map (as written).
        events: Events it learned from.
        doublets: True doublets it learned from.
    """

    module_map: ModuleMap
    events: int
    doublets: int


def fit_module_map_file(
    out: str | os.PathLike[str],
    *,
    events_files: Sequence[str | os.PathLike[str]] = (),
    simulated: SimulatedEvents | None = None,
    geometry: str | None = None,
    fit: MapFit = MapFit(),
    progress: bool = True,
) -> FittedMap:
    """Fits a module map to the doublets of ``events_files`` and ``simulated`` events (in that
    order) and writes it to ``out``.

    Args:
        out: The map file (``.npz``).
        events_files: Events files (``partgnn simulate``, ``import-trackml``).
        simulated: Events simulated on the fly.
        geometry: The detector (a name or a file; default: partgnn's TrackML detector).
        fit: Which doublets, and the windows.
        progress: Show a progress bar per source.

    Raises:
        InputError: No source, an unreadable one, or a map that cannot be fitted or written.
    """
    from tqdm import tqdm

    runs = list(simulated.runs) if simulated is not None else []
    if not events_files and not runs:
        raise InputError("fit-module-map: give events files, --simulate SEED:FIRST:EVENTS, or both")
    detector = load_geometry(geometry)
    selection = {
        "pt_min": fit.pt_min, "triplets": fit.triplets, "max_vertex_radius": fit.max_vertex_radius
    }  # fmt: skip
    sources: list[tuple[str, int, Any]] = []
    for path in map(Path, events_files):
        from partgnn.data.files.storage import EventFile

        with EventFile(path) as events:
            total = len(events)
        sources.append((path.name, total, lambda p=path: file_doublets(p, detector, **selection)))
    for run in runs:
        sources.append((str(run), run.events, lambda r=run: simulated_doublets(
            r, geometry, pileup=simulated.pileup, workers=simulated.workers,
            module_planes=simulated.module_planes, field_profile=simulated.field_profile,
            secondaries=simulated.secondaries, **selection)))  # fmt: skip
    records = [SourceRecord() for _ in sources]

    def doublets() -> Iterator[EventDoublets]:
        for (label, total, read), record in zip(sources, records, strict=True):
            for event_id, attrs, found in tqdm(
                read(), total=total, desc=f"fit {label}", disable=not progress
            ):
                record.add(event_id, attrs, found)
                yield found

    settings: dict[str, Any] = {"pt_min": fit.pt_min, "geometry": detector.name}
    if fit.max_vertex_radius is not None:  # (maps fitted without it keep their settings)
        settings["max_vertex_radius"] = fit.max_vertex_radius
    floor = fit.floor
    if not isinstance(floor, (int, float)) and len(floor) == 1:
        floor = floor[0]
    module_map = fit_module_map(
        doublets(), window=fit.window, width=fit.width, settings=settings, floor=floor,
        triplet_floor=fit.triplet_floor,
    )  # fmt: skip
    events = sum(record.events for record in records)
    module_map.settings["sources"] = [record.as_dict() for record in records]
    module_map.settings["events"] = events
    if fit.precision == "float32":
        module_map = module_map.rounded_outward()
    module_map.save(out)
    return FittedMap(module_map, events, sum(record.doublets for record in records))
