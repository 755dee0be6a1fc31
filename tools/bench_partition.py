"""Benchmark of the partitioners on pile-up-200 event graphs: speed and partition quality.

Prints markdown tables; ``--record`` writes the METIS and phi rows at P = 2 and 8 into
docs/results/figures/partitioning.json (the current-figures page). Single-threaded on purpose:

    OMP_NUM_THREADS=1 .venv/bin/python tools/bench_partition.py --events 2 --record
"""

from __future__ import annotations

import os
import statistics
import time

import numpy as np
import torch
from _common import ToolParser, record_table

from partgnn.data.detector.geometry import default_geometry
from partgnn.data.graphs.graph_builder import GraphBuildConfig, build_event_graph
from partgnn.data.simulation.simulate import SimulationConfig, simulate_event
from partgnn.partition.assign import partition_graph
from partgnn.partition.halo_plan import build_halo_plans
from partgnn.partition.metis import metis_partition
from partgnn.partition.statistics import partition_statistics, summarize


def main() -> None:
    parser = ToolParser(__doc__, figures="partitioning")
    parser.add_argument("--events", type=int, default=2)
    parser.add_argument("--pileup", type=float, default=200.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hidden", type=int, default=64)
    parser.tiny(events=1, pileup=5.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    geometry = default_geometry()
    events = [
        simulate_event(geometry, SimulationConfig(pileup=args.pileup), event_id=i, seed=args.seed)
        for i in range(args.events)
    ]
    print(f"machine: {os.cpu_count()} cores, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
    measurements, sizes = [], []
    for pt_min in (0.0, 1.0):
        graphs = [
            build_event_graph(e, geometry, GraphBuildConfig(pt_min=pt_min))[0] for e in events
        ]
        nodes = np.mean([g.num_nodes for g in graphs])
        edges = np.mean([g.edge_index.shape[1] for g in graphs])
        cut = "no pT cut" if pt_min == 0 else f"pT > {pt_min:g} GeV"
        sizes.append(f"{edges:,.0f} edges {'without pT cut' if pt_min == 0 else f'at {cut}'}")
        print(
            f"\n### pile-up {args.pileup:g}, {cut}: {nodes:,.0f} nodes, {edges:,.0f} edges "
            f"({len(graphs)} events)\n"
        )
        print(
            "| method | P | partition s | plans s | edge cut | true-edge cut | halo/owned "
            "| node imb. | edge imb. | work imb. | max peers | MB per exchange (H=64) |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for method in ("metis", "metis-degree", "phi", "phieta"):
            for n_parts in (2, 4, 8):
                measured = _row(graphs, method, n_parts, args.hidden)
                if method in ("metis", "phi") and n_parts in (2, 8):
                    measurements.append({"method": method, "parts": n_parts, "cut": cut,
                                         **measured})  # fmt: skip
    record_table(
        args.record, "partitions",
        f"Partitions of {args.events} simulated pile-up-{args.pileup:g} event graphs (mean "
        f"{' and '.join(sizes)}): edge cut (the share of edges between parts), work imbalance "
        "(the busiest rank's edges and owned and halo nodes over the mean), halo over owned "
        "nodes, and the seconds to partition",
        measurements, row_label="{method}, P = {parts}", column_label="{cut}",
        cell="cut {edge_cut:.4f}, imbalance {work_imbalance:.3f}, halo {halo_ratio:.4f}, "
        "{seconds:.3f} s",
    )  # fmt: skip


def _row(graphs, method: str, n_parts: int, hidden: int) -> dict[str, float]:
    """Partitions ``graphs`` into ``n_parts`` by ``method``, prints a table row.

    Returns:
        The figures: partition seconds (median), edge cut, work imbalance, halo/owned.
    """
    partition_seconds, plan_seconds, stats = [], [], []
    for graph in graphs:
        start = time.perf_counter()
        if method == "metis-degree":  # the weighting before issue 13: 1 + degree
            assignment = metis_partition(
                graph.edge_index, graph.num_nodes, n_parts, vertex_weights="degree"
            )
        else:
            assignment = partition_graph(graph, n_parts, method, seed=0)
        partition_seconds.append(time.perf_counter() - start)
        edge_index = graph.edge_index.numpy()
        start = time.perf_counter()
        plans = build_halo_plans(edge_index, assignment, n_parts)
        plan_seconds.append(time.perf_counter() - start)
        stats.append(partition_statistics(plans, edge_index, graph.y.numpy()))
    s = summarize(stats, hidden)
    print(
        f"| {method} | {n_parts} | {statistics.median(partition_seconds):.3f} "
        f"| {statistics.median(plan_seconds):.3f} | {s['edge_cut_fraction']:.4f} "
        f"| {s['true_edge_cut_fraction']:.4f} | {s['halo_ratio_mean']:.4f} "
        f"| {s['node_imbalance']:.3f} | {s['edge_imbalance']:.3f} | {s['work_imbalance']:.3f} "
        f"| {s['neighbours_max']:.0f} "
        f"| {s['bytes_per_exchange_total'] / 1e6:.3f} |",
        flush=True,
    )
    return {"seconds": statistics.median(partition_seconds), "edge_cut": s["edge_cut_fraction"],
            "work_imbalance": s["work_imbalance"], "halo_ratio": s["halo_ratio_mean"]}  # fmt: skip


if __name__ == "__main__":
    main()
