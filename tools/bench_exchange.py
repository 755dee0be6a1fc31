"""Benchmark of the halo exchange: time and bytes per exchange vs P, hidden size and transport.

Simulates one pile-up-200 event, builds its graph (no pT cut: ~1e5 nodes, ~1.1e6 edges unless
--pt-min is given), partitions it with METIS for each P, and times forward + backward halo
exchanges under torchrun (one thread per rank). Prints markdown rows; ``--record`` puts the
time and bytes of each P, hidden size and transport on the current-figures page:

    .venv/bin/python tools/bench_exchange.py --parts 2 3 4 --hidden 16 64 128
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch
from _common import ToolParser, record_table, torchrun


def main() -> None:
    parser = ToolParser(__doc__, figures="exchange")
    parser.add_argument("--parts", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--hidden", type=int, nargs="+", default=[16, 64, 128])
    parser.add_argument("--pt-min", type=float, default=0.0)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--results", type=Path, default=None, help=argparse.SUPPRESS)
    parser.tiny(parts=[2], hidden=[8], repeats=2, pt_min=1.0)
    args = parser.parse_args()
    if args.worker is not None:
        _worker(args)
        return
    from partgnn.data.detector.geometry import default_geometry
    from partgnn.data.files.writers import write_graphs
    from partgnn.data.graphs.graph_builder import GraphBuildConfig, build_event_graph
    from partgnn.data.simulation.simulate import SimulationConfig, simulate_event
    from partgnn.partition.event_split import PartitionOptions
    from partgnn.partition.shard_writer import write_shards

    geometry = default_geometry()
    event = simulate_event(geometry, SimulationConfig(pileup=200), event_id=0, seed=1)
    graph, quality = build_event_graph(event, geometry, GraphBuildConfig(pt_min=args.pt_min))
    print(
        f"event graph: {graph.num_nodes:,} nodes, {graph.edge_index.shape[1]:,} edges; "
        f"machine {os.cpu_count()} cores, one thread per rank"
    )
    print(
        "\n| P | H | transport | ms per exchange, fwd+bwd (median) | rows sent, max rank "
        "| MB sent per exchange, all ranks | MB per step (fwd+bwd), max rank |"
    )
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        results = Path(folder) / "results.jsonl"
        graphs = Path(folder) / "graphs.h5"
        write_graphs(graphs, [(graph, quality.to_dict())])
        for n_parts in args.parts:
            shards = Path(folder) / f"metis{n_parts}"
            write_shards(graphs, shards, PartitionOptions(n_parts=n_parts), progress=False)
            command = torchrun(
                n_parts, __file__, "--worker", shards, "--repeats", str(args.repeats),
                "--hidden", *map(str, args.hidden), "--results", results,
            )  # fmt: skip
            env = dict(os.environ, OMP_NUM_THREADS="1")
            subprocess.run(command, check=True, env=env)
        measurements = [json.loads(line) for line in results.read_text().splitlines()]
    edges = f"{graph.edge_index.shape[1]:,} edges" + (
        f", pT > {args.pt_min:g} GeV" if args.pt_min else ", every hit"
    )
    record_table(
        args.record, "exchange",
        f"One forward + backward halo exchange of a pile-up-200 event graph ({edges}, METIS), "
        f"median of {args.repeats}, one thread per rank: milliseconds, and MB all ranks send "
        "forward",
        measurements, row_label="P = {parts}, H = {hidden}", column_label="{transport}",
        cell="{ms:.2f} ms, {mb_sent:.2f} MB",
    )  # fmt: skip


def _worker(args: argparse.Namespace) -> None:
    import torch.distributed as dist

    from partgnn.distributed.communication_counter import CommunicationCounter
    from partgnn.distributed.exchange_plan import ExchangePlan
    from partgnn.distributed.halo_exchange import halo_exchange
    from partgnn.distributed.process_group import destroy_distributed, init_distributed
    from partgnn.partition.shard_reader import ShardDirectory

    torch.set_num_threads(1)
    context = init_distributed(device="cpu", timeout_s=120)
    with ShardDirectory(args.worker, world_size=context.group_size).open_rank(
        context.group_rank
    ) as s:
        plan = ExchangePlan.from_halo_plan(s[0].plan)
    for hidden in args.hidden:
        for transport in ("all_to_all", "p2p"):
            counter = CommunicationCounter()
            x = torch.randn(plan.n_owned, hidden, requires_grad=True)
            times = []
            for repeat in range(args.repeats + 3):
                dist.barrier(group=context.group)
                start = time.perf_counter()
                halo_exchange(
                    x, plan, context, transport=transport, counter=counter
                ).sum().backward()
                if repeat >= 3:  # warm-up
                    times.append(time.perf_counter() - start)
            median = torch.tensor(statistics.median(times))
            dist.all_reduce(median, op=dist.ReduceOp.MAX, group=context.group)
            exchanges = counter.forward_exchanges
            forward_bytes = counter.forward_bytes_sent // exchanges
            step_bytes = counter.bytes_sent // exchanges  # forward + backward
            maxima = torch.tensor([plan.rows_sent, step_bytes])
            dist.all_reduce(maxima, op=dist.ReduceOp.MAX, group=context.group)
            forward_total = torch.tensor(forward_bytes)
            dist.all_reduce(forward_total, group=context.group)
            if context.is_main:
                print(
                    f"| {context.group_size} | {hidden} | {transport} | {median.item() * 1e3:.2f} "
                    f"| {maxima[0].item():,} | {forward_total.item() / 1e6:.3f} "
                    f"| {maxima[1].item() / 1e6:.3f} |",
                    flush=True,
                )
                measured = {"parts": context.group_size, "hidden": hidden,
                            "transport": transport, "ms": median.item() * 1e3,
                            "rows_sent_max": maxima[0].item(),
                            "mb_sent": forward_total.item() / 1e6,
                            "mb_per_step_max": maxima[1].item() / 1e6}  # fmt: skip
                with open(args.results, "a") as results:
                    results.write(json.dumps(measured) + "\n")
    destroy_distributed(context)


if __name__ == "__main__":
    main()
