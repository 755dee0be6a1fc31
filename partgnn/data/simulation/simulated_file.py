"""A file of simulated events as ``partgnn simulate`` writes it: its provenance (what made it, and
the SHA-256 of that, which names the simulation) and the rule for an existing file at its path
(only an events file of this very simulation is replaced without ``overwrite``: writing it
again changes nothing)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from partgnn.data.detector.geometry import DetectorGeometry
from partgnn.data.event import Event
from partgnn.data.files.storage import EventFile, open_store
from partgnn.data.files.writers import write_events
from partgnn.data.simulation.simulate import simulate_events
from partgnn.data.simulation.simulation_config import SimulationConfig
from partgnn.errors import InputError


def simulation_provenance(
    geometry: DetectorGeometry,
    config: SimulationConfig,
    *,
    seed: int,
    events: int,
    first_event_id: int = 0,
) -> dict[str, Any]:
    """What an events file of ``events`` simulated events records of its making: the source,
    seed, geometry and settings, and ``simulation_sha256``, the SHA-256 of those and of the
    event ids (the same simulation, and only it, has the same digest)."""
    provenance: dict[str, Any] = {
        "source": "simulation",
        "seed": seed,
        "geometry": geometry.name,
        "config": json.loads(config.to_json()),
    }
    what = {**provenance, "events": events, "first_event_id": first_event_id}
    digest = hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()
    provenance["simulation_sha256"] = digest
    return provenance


def check_replaceable(out: str | os.PathLike[str], simulation_sha256: str) -> None:
    """Refuses an existing ``out`` unless it is an events file of this very simulation.

    Raises:
        InputError: One line saying what the file is and how to replace it.
    """
    out = Path(out)
    if not out.is_file():
        return  # absent; or a folder, which the output check names
    try:
        with open_store(out) as existing:
            if isinstance(existing, EventFile):
                if existing.attrs.get("simulation_sha256") == simulation_sha256:
                    return  # the same events again: writing it changes nothing
                what = "an events file of another simulation or source"
            else:
                what = f"a {existing.expected_format} file"
    except InputError:
        what = "not a partgnn events file"
    raise InputError(
        f"{out}: exists ({what}); simulate does not replace it without --overwrite: choose "
        "another --out, or add --overwrite"
    )


def write_simulated_events(
    out: str | os.PathLike[str],
    geometry: DetectorGeometry,
    config: SimulationConfig,
    *,
    events: int,
    seed: int,
    first_event_id: int = 0,
    workers: int = 1,
    overwrite: bool = False,
    watch: Callable[[Iterable[Event]], Iterable[Event]] | None = None,
) -> int:
    """Simulates ``events`` events and writes them to ``out`` with their provenance
    (:func:`simulation_provenance`); returns how many were written.

    Args:
        out: The events file.
        geometry: The detector.
        config: What to simulate.
        events: How many events.
        seed: The run's seed (event ``k``'s random streams derive from it and ``k``).
        first_event_id: The first event's id.
        workers: Processes simulating events side by side (the file is the same for any).
        overwrite: Replace whatever ``out`` is (else only an events file of this simulation).
        watch: Sees the events as they stream to the file (a progress bar, counts).

    Raises:
        InputError: ``out`` exists and may not be replaced (:func:`check_replaceable`).
    """
    provenance = simulation_provenance(
        geometry, config, seed=seed, events=events, first_event_id=first_event_id
    )
    if not overwrite:
        check_replaceable(out, provenance["simulation_sha256"])
    simulated = simulate_events(
        geometry, config, n_events=events, seed=seed, first_event_id=first_event_id,
        workers=workers,
    )  # fmt: skip
    return write_events(out, simulated if watch is None else watch(simulated),
                        provenance=provenance)  # fmt: skip
