"""Benchmark of the data stage: simulation and graph construction on pile-up-200 events.

Prints markdown tables for docs/BENCHMARKS.md. Run single-threaded on purpose:

    OMP_NUM_THREADS=1 .venv/bin/python tools/bench_data.py --events 3 --pileup 200
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np
import torch
from _paths import sample_dir

from partgnn.data.geometry import default_geometry
from partgnn.data.graph_builder import GraphBuildConfig, build_event_graph
from partgnn.data.simulation import SimulationConfig, simulate_event
from partgnn.data.trackml_reader import read_trackml_event


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=3)
    parser.add_argument("--pileup", type=float, default=200.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(1)
    geometry = default_geometry()
    print(
        f"machine: {os.cpu_count()} cores ({platform.processor() or platform.machine()}), "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, torch threads 1"
    )

    sim_times, events = [], []
    for event_id in range(args.events):
        start = time.perf_counter()
        event = simulate_event(
            geometry, SimulationConfig(pileup=args.pileup), event_id=event_id, seed=args.seed
        )
        sim_times.append(time.perf_counter() - start)
        events.append(event)
    noise = [float((e.truth["particle_id"] == 0).mean()) for e in events]
    print(f"\n### simulate, pile-up {args.pileup:g} ({args.events} events)\n")
    print("| particles | hits | noise fraction | seconds/event (median, min-max) |")
    print("|---|---|---|---|")
    print(
        f"| {np.mean([len(e.particles) for e in events]):,.0f} "
        f"| {np.mean([len(e.hits) for e in events]):,.0f} | {np.mean(noise):.3f} "
        f"| {statistics.median(sim_times):.2f} ({min(sim_times):.2f}-{max(sim_times):.2f}) |"
    )

    print(f"\n### build-graphs, pile-up {args.pileup:g} simulated events\n")
    _graph_table([("simulated", e) for e in events], geometry)

    sample_folder = sample_dir()
    if sample_folder is not None:
        sample = sample_folder / "event000000001"
        print("\n### build-graphs, real TrackML sample event (5% of a pile-up-200 event)\n")
        _graph_table([("trackml sample", read_trackml_event(sample, geometry=geometry))], geometry)


def _graph_table(named_events, geometry) -> None:
    print("| events | pT cut | nodes | edges | efficiency | purity | seconds/event |")
    print("|---|---|---|---|---|---|---|")
    for pt_min in (0.0, 1.0):
        config = GraphBuildConfig(pt_min=pt_min)
        rows = []
        for _, event in named_events:
            start = time.perf_counter()
            _, quality = build_event_graph(event, geometry, config)
            rows.append((quality, time.perf_counter() - start))
        q = [r[0] for r in rows]
        seconds = [r[1] for r in rows]
        print(
            f"| {named_events[0][0]} x{len(rows)} | {'none' if pt_min == 0 else f'{pt_min:g} GeV'} "
            f"| {np.mean([x.n_nodes for x in q]):,.0f} | {np.mean([x.n_edges for x in q]):,.0f} "
            f"| {np.mean([x.efficiency for x in q]):.4f} | {np.mean([x.purity for x in q]):.4f} "
            f"| {statistics.median(seconds):.2f} |"
        )


if __name__ == "__main__":
    main()
