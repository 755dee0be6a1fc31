"""Benchmark of the data stage: simulation and graph construction on pile-up-200 events.

Prints markdown tables; ``--record`` writes them into docs/results/figures/data.json (the
current-figures page: a table of the simulation, one of the graphs by events and pT cut). Run
single-threaded on purpose:

    OMP_NUM_THREADS=1 .venv/bin/python tools/bench_data.py --events 3 --pileup 200 --record
"""

from __future__ import annotations

import os
import platform
import statistics
import time

import numpy as np
import torch
from _common import ToolParser, markdown_table, record_table
from _paths import sample_dir

from partgnn.data.detector.geometry import default_geometry
from partgnn.data.formats.trackml_reader import read_trackml_event
from partgnn.data.graphs.graph_builder import GraphBuildConfig, build_event_graph
from partgnn.data.simulation.simulate import SimulationConfig, simulate_event


def main() -> None:
    parser = ToolParser(__doc__, figures="data")
    parser.add_argument("--events", type=int, default=3)
    parser.add_argument("--pileup", type=float, default=200.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.tiny(events=1, pileup=5.0)
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
    hits = np.mean([len(e.hits) for e in events])
    seconds = f"{statistics.median(sim_times):.2f} ({min(sim_times):.2f}-{max(sim_times):.2f})"
    header = ("particles", "hits", "noise fraction", "seconds/event (median, min-max)")
    particles = np.mean([len(e.particles) for e in events])
    print(
        markdown_table(
            header, [(f"{particles:,.0f}", f"{hits:,.0f}", f"{np.mean(noise):.3f}", seconds)]
        )
    )
    simulation = {"pileup": args.pileup, "events": args.events, "hits": float(hits),
                  "noise": float(np.mean(noise)), "median_s": statistics.median(sim_times),
                  "min_s": min(sim_times), "max_s": max(sim_times)}  # fmt: skip
    print(f"\n### build-graphs, pile-up {args.pileup:g} simulated events\n")
    graphs = _graph_table(f"pile-up {args.pileup:g} ({args.events} simulated events)", events,
                          geometry)  # fmt: skip

    sample_folder = sample_dir()
    if sample_folder is not None:
        sample_event = read_trackml_event(sample_folder / "event000000001", geometry=geometry)
        print("\n### build-graphs, real TrackML sample event (5% of a pile-up-200 event)\n")
        graphs += _graph_table("the real TrackML sample event", [sample_event], geometry)
    record_table(
        args.record, "simulate",
        "Simulated events (partgnn simulate, one thread): hits per event and the share of noise "
        "hits, seconds per event",
        [simulation],
        row_label="pile-up {pileup:g} ({events} events)",
        column_label="hits per event (noise), seconds per event: median (min-max)",
        cell="{hits:,.0f} ({noise:.3f}), {median_s:.2f} s ({min_s:.2f}-{max_s:.2f})",
    )  # fmt: skip
    record_table(
        args.record, "geometric_graphs",
        "Geometric graphs (partgnn build-graphs, one thread): nodes, edges, construction "
        "efficiency (true consecutive pairs kept as edges among the kept hits), edge purity and "
        "seconds per event",
        graphs,
        row_label="{events}", column_label="{cut}",
        cell="{nodes:,.0f} nodes, {edges:,.0f} edges, efficiency {efficiency:.4f}, purity "
        "{purity:.4f}, {seconds:.2f} s",
    )  # fmt: skip


def _graph_table(name: str, events, geometry) -> list[dict]:
    """Builds the geometric graphs of ``events`` without and with a 1 GeV cut, prints a table.

    Returns:
        The measurements: per cut, mean nodes, edges, construction efficiency and purity, and
        the median seconds per event.
    """
    rows, measurements = [], []
    for pt_min in (0.0, 1.0):
        config = GraphBuildConfig(pt_min=pt_min)
        qualities, seconds = [], []
        for event in events:
            start = time.perf_counter()
            _, quality = build_event_graph(event, geometry, config)
            qualities.append(quality)
            seconds.append(time.perf_counter() - start)
        cut = "no pT cut" if pt_min == 0 else f"pT > {pt_min:g} GeV"
        nodes = np.mean([q.n_nodes for q in qualities])
        edges = np.mean([q.n_edges for q in qualities])
        efficiency = np.mean([q.efficiency for q in qualities])
        purity = np.mean([q.purity for q in qualities])
        rows.append(
            (
                f"{name} x{len(events)}",
                cut,
                f"{nodes:,.0f}",
                f"{edges:,.0f}",
                f"{efficiency:.4f}",
                f"{purity:.4f}",
                f"{statistics.median(seconds):.2f}",
            )
        )
        measurements.append({
            "events": name, "cut": cut, "nodes": float(nodes), "edges": float(edges),
            "efficiency": float(efficiency), "purity": float(purity),
            "seconds": statistics.median(seconds),
        })  # fmt: skip
    header = ("events", "pT cut", "nodes", "edges", "efficiency", "purity", "seconds/event")
    print(markdown_table(header, rows))
    return measurements


if __name__ == "__main__":
    main()
