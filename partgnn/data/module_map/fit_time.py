"""How long fitting a module map on simulated events takes here, said before it starts: the
simulation and the doublets cost about the same per event for any map, so the time is the
events' count by a measured cost per pile-up-200 event and worker."""

from __future__ import annotations

import os
import sys

from partgnn.data.module_map.fit_files import SimulatedEvents

#: Worker-seconds ``fit-module-map --simulate`` spends per simulated pile-up-200 event
#: (simulation and doublets, triplets on): 12.9 min for 4,000 events on 2 workers, 2 cores
#: x86_64, 2026-11-27.
FIT_SECONDS_PER_EVENT = 0.39
#: The same with the simulation's realism switches on (``--module-planes --field-profile
#: --secondaries``), ``pretrained:trackml-full``'s card's options: 200 events took 79.8 s and 40
#: took 24.7 s on 2 workers, 0.344 s of wall time per event more (2 cores x86_64, 2026-12-06;
#: the 1.41 s of 2026-11-28 was measured on a day this machine ran 1.55x slow, and made the
#: card's 4,000-event refit's estimate 47 min where it took about 20-34).
FIT_SECONDS_PER_REALISTIC_EVENT = 0.69


def expected_fit_time(events: int, pileup: float, workers: int, realistic: bool) -> str:
    """The line a fit on ``events`` simulated events starts with: how long it is expected to
    take here (``realistic``: one of the simulation's realism switches is on)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    used = max(1, min(workers, cores or 1))
    per_event = FIT_SECONDS_PER_REALISTIC_EVENT if realistic else FIT_SECONDS_PER_EVENT
    seconds = events * per_event * max(pileup, 1.0) / 200.0 / used
    expected = f"{seconds / 60:.0f} min" if seconds >= 90 else f"{max(seconds, 1):.0f} s"
    switches = " with the realism switches (all three; fewer take less)" if realistic else ""
    return (
        f"fit-module-map: simulating {events:,} events of pile-up {pileup:g} on {used} "
        f"worker(s) of this machine's {cores} cores: expected about {expected} "
        f"({per_event} s per pile-up-200 event and worker{switches}, measured on 2 cores "
        "x86_64; --workers N uses more cores)"
    )


def fit_time_notice(simulated: SimulatedEvents) -> str | None:
    """:func:`expected_fit_time` of ``simulated``'s events (``None`` without any)."""
    if not simulated.runs:
        return None
    realistic = simulated.module_planes or simulated.field_profile or simulated.secondaries
    events = sum(run.events for run in simulated.runs)
    return expected_fit_time(events, simulated.pileup, simulated.workers, realistic)


def say_fit_time(simulated: SimulatedEvents) -> None:
    """One line on stderr: how long simulating ``simulated``'s events for a fit will take here
    (:func:`fit_time_notice`; nothing without simulated events)."""
    notice = fit_time_notice(simulated)
    if notice is not None:
        print(notice, file=sys.stderr)
