"""What the PyG layers and settings that PartitionedLayer refuses would have done, and what
its failure agreement costs.

Run under a launcher; every rank simulates the same pile-up-10 event (no pT cut: ~5,000 nodes),
partitions it with METIS and, for each refused layer or setting, runs it the way the wrapper
would if it did not refuse (exchange x, run the layer on the local graph, keep the owned rows).
Rank 0 assembles the owned rows and prints, per case, the relative error against the same
layer on the whole graph in one process (float64, same weights, same seed), or the exception
the run raised. Then it times a GraphConv forward + backward through PartitionedLayer with and
without the failure agreement (median of --repeats)::

    OMP_NUM_THREADS=1 .venv/bin/torchrun --standalone --nproc-per-node 3 \\
        tools/studies/bench_pyg_refusals.py
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

# tools/: the helpers the studies share with the benchmarks (_common, _paths, _rank_step).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import ToolParser
from torch import nn
from torch_geometric import nn as gnn
from torch_geometric.utils import degree

import partgnn
from partgnn.data.detector.geometry import default_geometry
from partgnn.data.graphs.graph_builder import GraphBuildConfig, build_event_graph
from partgnn.data.simulation.simulate import SimulationConfig, simulate_event

F_IN, HIDDEN = 4, 8


class SourceDegreeNorm(gnn.MessagePassing):
    """A small custom layer normalised by the source node's degree."""

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        out_degree = degree(edge_index[0], x.shape[0]).clamp(min=1)
        return self.propagate(edge_index, x=x / out_degree.unsqueeze(-1))


def _mlp(width_in: int, *middle: nn.Module) -> nn.Sequential:
    return nn.Sequential(nn.Linear(width_in, HIDDEN), *middle, nn.ReLU(), nn.Linear(HIDDEN, HIDDEN))


#: Refused layers and settings, in training mode.
CASES: dict[str, Callable[[], nn.Module]] = {
    "GatedGraphConv(num_layers=3)": lambda: gnn.GatedGraphConv(HIDDEN, num_layers=3),
    "GENConv() (norm='batch'), training": lambda: gnn.GENConv(F_IN, HIDDEN),
    "GINConv(MLP with BatchNorm1d), training": lambda: gnn.GINConv(
        _mlp(F_IN, nn.BatchNorm1d(HIDDEN))
    ),
    "EdgeConv(MLP with BatchNorm1d), training": lambda: gnn.EdgeConv(
        _mlp(2 * F_IN, nn.BatchNorm1d(HIDDEN))
    ),
    "GINConv(MLP with GraphNorm)": lambda: gnn.GINConv(_mlp(F_IN, gnn.GraphNorm(HIDDEN))),
    "GATConv(dropout=0.5), training": lambda: gnn.GATConv(F_IN, 4, heads=2, dropout=0.5),
    "SourceDegreeNorm (own layer)": SourceDegreeNorm,
    "SGConv(K=2)": lambda: gnn.SGConv(F_IN, HIDDEN, K=2),
    "TAGConv(K=3)": lambda: gnn.TAGConv(F_IN, HIDDEN, K=3),
    "ChebConv(K=3)": lambda: gnn.ChebConv(F_IN, HIDDEN, K=3),
    "APPNP(K=5)": lambda: gnn.APPNP(K=5, alpha=0.1),
    "ARMAConv": lambda: gnn.ARMAConv(F_IN, HIDDEN, num_layers=2),
    "LGConv": lambda: gnn.LGConv(),
    "MixHopConv": lambda: gnn.MixHopConv(F_IN, HIDDEN),
    "SAGEConv(aggr='lstm')": lambda: gnn.SAGEConv(F_IN, HIDDEN, aggr="lstm"),
    "PANConv": lambda: gnn.PANConv(F_IN, HIDDEN, filter_size=2),
    "DynamicEdgeConv": lambda: gnn.DynamicEdgeConv(_mlp(2 * F_IN), k=4),
}


def main() -> None:
    parser = ToolParser(__doc__)
    parser.add_argument("--repeats", type=int, default=50)
    parser.tiny(repeats=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    context = partgnn.init_distributed(device="cpu")
    try:
        geometry = default_geometry()
        event = simulate_event(geometry, SimulationConfig(pileup=10), event_id=0, seed=3)
        graph, _ = build_event_graph(event, geometry, GraphBuildConfig(pt_min=0.0))
        graph.x = graph.x.double()
        plan = partgnn.partition_event(graph, context.group_size, method="metis")[
            context.group_rank
        ]
        part = partgnn.local_graph(graph, plan)
        exchange = partgnn.make_exchange(plan, context)
        x_owned = part.x[: plan.n_owned]
        if context.is_main:
            print(
                f"{graph.num_nodes} nodes, {graph.num_edges} edges, P = {context.group_size} "
                "(METIS), float64, training mode\n"
            )
            print("| refused layer or setting | if run anyway: relative error of outputs |")
            print("|---|---|")
        for name, build in CASES.items():
            _compare(name, build, graph, part, plan, x_owned, exchange, context)
        _time_agreement(part, plan, x_owned, exchange, context, args.repeats)
    finally:
        partgnn.destroy_distributed(context)


def _compare(name, build, graph, part, plan, x_owned, exchange, context) -> None:
    result: str | torch.Tensor
    try:
        torch.manual_seed(7)
        layer = build().double()
        torch.manual_seed(8)  # the same dropout stream as the whole-graph run below
        # What PartitionedLayer would do if it did not refuse.
        result = layer(exchange(x_owned), edge_index=part.edge_index)[: plan.n_owned].detach()
    except Exception as err:  # the case fails on this rank: report it
        result = f"raises {type(err).__name__}: {str(err).splitlines()[0][:70]}"
    gathered = [None] * context.group_size
    dist.all_gather_object(gathered, (plan.owned_nodes, result), group=context.group)
    if not context.is_main:
        return
    failures = [r for _, r in gathered if isinstance(r, str)]
    if failures:
        print(f"| {name} | {failures[0]} |")
        return
    torch.manual_seed(7)
    layer = build().double()
    torch.manual_seed(8)
    reference = layer(graph.x, edge_index=graph.edge_index).detach()
    out = torch.full_like(reference, float("nan"))
    for nodes, rows in gathered:
        out[torch.from_numpy(nodes)] = rows
    error = float((out - reference).norm() / reference.norm())
    print(f"| {name} | {error:.2g} |")


def _time_agreement(part, plan, x_owned, exchange, context, repeats: int) -> None:
    times = {}
    for check_errors in (False, True, False, True):
        torch.manual_seed(0)
        wrapped = partgnn.PartitionedLayer(gnn.GraphConv(F_IN, HIDDEN), check_errors=check_errors)
        wrapped = wrapped.double()
        samples = []
        for _ in range(repeats):
            dist.barrier(group=context.group)
            start = time.perf_counter()
            wrapped(x_owned, part.edge_index, exchange).square().sum().backward()
            samples.append(time.perf_counter() - start)
        times[check_errors] = statistics.median(samples) * 1e3
    medians = torch.tensor([times[False], times[True]], dtype=torch.float64)
    dist.all_reduce(medians, op=dist.ReduceOp.MAX, group=context.group)
    if context.is_main:
        off, on = medians.tolist()
        print(
            f"\nGraphConv forward + backward on a partition ({plan.n_owned} owned nodes on rank "
            f"0), median of {repeats}, slowest rank: {off:.2f} ms without the failure "
            f"agreement, {on:.2f} ms with it (+{on - off:.2f} ms per layer)"
        )


if __name__ == "__main__":
    main()
