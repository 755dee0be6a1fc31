"""Does a rank's step time follow its work (local edges + owned and halo nodes, each weighted
by its cost in edges)?

METIS partitions are balanced by that work since issue 13 (:mod:`partgnn.partition.work`);
before, by ``1 + degree``. This benchmark checks the cost model against time: it simulates
pile-up-200 events, partitions each graph with both weightings for P = 2, 4, 8, and times one
training step (forward, weighted BCE, backward) of every rank's own local graph, one rank
after the other in this process on one thread, with a loop-back halo exchange (halo rows are
copies of owned rows: nothing waits on a peer, so a rank's time is its compute). Prints, for
each partition, the imbalance (max / mean over ranks) of edges, work and measured seconds, and
the share of a step the ranks would sit idle waiting for the slowest (``1 - mean / max`` of the
seconds); then, over all ranks of all partitions and both graph densities, the costs of an
owned and a halo node in units of an edge fitted to the seconds (least squares), beside the
model's costs (:data:`~partgnn.partition.work.OWNED_NODE_COST`, ``HALO_NODE_COST``).

    OMP_NUM_THREADS=1 .venv/bin/python tools/studies/bench_work_model.py --events 2
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

# tools/: the helpers the studies share with the benchmarks (_common, _paths, _rank_step).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import ToolParser
from _rank_step import RankStep

from partgnn.data.detector.geometry import default_geometry
from partgnn.data.graphs.graph_builder import GraphBuildConfig, build_event_graph
from partgnn.data.simulation.simulate import SimulationConfig, simulate_event
from partgnn.models.config import ModelConfig
from partgnn.partition.halo_plan import build_halo_plans
from partgnn.partition.metis import metis_partition
from partgnn.partition.work import HALO_NODE_COST, OWNED_NODE_COST, imbalance, rank_work

WEIGHTINGS = ("degree", "work")


def main() -> None:
    parser = ToolParser(__doc__)
    parser.add_argument("--events", type=int, default=2)
    parser.add_argument("--pileup", type=float, default=200.0)
    parser.add_argument("--pt-min", type=float, nargs="+", default=[1.0, 0.0])
    parser.add_argument("--parts", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--steps", type=int, default=4, help="message-passing steps")
    parser.add_argument("--repeats", type=int, default=5, help="timed steps per rank (least)")
    parser.tiny(events=1, pileup=5.0, pt_min=[1.0], parts=[2], hidden=8, steps=1, repeats=1)
    args = parser.parse_args()
    torch.set_num_threads(1)
    geometry = default_geometry()
    events = [
        simulate_event(geometry, SimulationConfig(pileup=args.pileup), event_id=i, seed=1)
        for i in range(args.events)
    ]
    model_config = ModelConfig(hidden=args.hidden, steps=args.steps)
    rows: list[RankTime] = []
    print(
        f"machine: {os.cpu_count()} cores, one thread; Interaction Network H = {args.hidden}, "
        f"{args.steps} steps, float32; least of {args.repeats} steps per rank, ranks in turn"
    )
    for pt_min in args.pt_min:
        graphs = [
            build_event_graph(e, geometry, GraphBuildConfig(pt_min=pt_min))[0] for e in events
        ]
        cut = "no pT cut" if pt_min == 0 else f"pT > {pt_min:g} GeV"
        print(
            f"\n### pile-up {args.pileup:g}, {cut}: "
            f"{np.mean([g.num_nodes for g in graphs]):,.0f} nodes, "
            f"{np.mean([g.edge_index.shape[1] for g in graphs]):,.0f} edges "
            f"({len(graphs)} events; imbalances are means over them)\n"
        )
        print(
            "| weighting | P | edge imb. | work imb. | time imb. | idle share of a step "
            "| rank seconds (event 0) |"
        )
        print("|---|---|---|---|---|---|---|")
        for n_parts in args.parts:
            for weighting in WEIGHTINGS:
                per_event = []
                for graph in graphs:
                    ranks = _time_ranks(graph, n_parts, weighting, model_config, args.repeats)
                    rows.extend(ranks)
                    per_event.append(ranks)
                _print_row(weighting, n_parts, per_event)
    _print_fit(rows)


@dataclass(frozen=True)
class RankTime:
    """One rank's counts and its least step seconds over the repeats."""

    edges: int
    owned: int
    halo: int
    seconds: float

    @property
    def work(self) -> float:
        return float(rank_work(np.array([self.edges]), np.array([self.owned]),
                               np.array([self.halo]))[0])  # fmt: skip


def _time_ranks(
    graph, n_parts: int, weighting: str, model_config: ModelConfig, repeats: int
) -> list[RankTime]:
    """Counts and least step seconds of each rank of one partition."""
    edge_index = graph.edge_index.numpy()
    part = metis_partition(graph.edge_index, graph.num_nodes, n_parts, vertex_weights=weighting)
    steps = [RankStep(graph, plan, model_config) for plan in build_halo_plans(
        edge_index, part, n_parts)]  # fmt: skip
    # Round robin, the least of the repeats: drifts of the machine touch every rank alike.
    seconds: list[list[float]] = [[] for _ in steps]
    for repeat in range(repeats + 1):  # the first warms up
        for rank, step in enumerate(steps):
            start = time.perf_counter()
            step()
            if repeat:
                seconds[rank].append(time.perf_counter() - start)
    return [
        RankTime(edges, owned, halo, min(times))
        for (edges, owned, halo), times in zip((s.counts for s in steps), seconds, strict=True)
    ]


def _print_row(weighting: str, n_parts: int, per_event: list[list[RankTime]]) -> None:
    def mean_imbalance(value) -> float:
        return float(np.mean([imbalance(np.array([value(r) for r in ev])) for ev in per_event]))

    idle = np.mean(
        [1 - np.mean([r.seconds for r in ev]) / max(r.seconds for r in ev) for ev in per_event]
    )
    print(
        f"| {weighting} | {n_parts} | {mean_imbalance(lambda r: r.edges):.3f} "
        f"| {mean_imbalance(lambda r: r.work):.3f} | {mean_imbalance(lambda r: r.seconds):.3f} "
        f"| {100 * idle:.1f} % | {' / '.join(f'{r.seconds:.3f}' for r in per_event[0])} |",
        flush=True,
    )


def _print_fit(rows: list[RankTime]) -> None:
    """Seconds = a * edges + b * owned + c * halo + d over every timed rank; b / a and c / a
    are the node costs in edge units (beside the work model's)."""
    design = np.array([[r.edges, r.owned, r.halo, 1.0] for r in rows], dtype=np.float64)
    seconds = np.array([r.seconds for r in rows])
    (per_edge, per_owned, per_halo, constant), *_ = np.linalg.lstsq(design, seconds, rcond=None)
    fitted = design @ np.array([per_edge, per_owned, per_halo, constant])
    worst = float(np.max(np.abs(fitted / seconds - 1)))
    print(
        f"\nfitted over {len(rows)} ranks: {1e6 * per_edge:.2f} us per edge, an owned node "
        f"{per_owned / per_edge:.2f} edges, a halo node {per_halo / per_edge:.2f} edges, "
        f"{1e3 * constant:.1f} ms per step (worst rank off the fit by {100 * worst:.1f} %; "
        f"the work model: {OWNED_NODE_COST} and {HALO_NODE_COST})"
    )


if __name__ == "__main__":
    main()
