"""A training step split over ranks, phase by phase, beside the same step in one process (issue 26).

Simulates one event (``--pileup``, every hit unless ``--pt-min``), builds its graph, partitions
it with METIS for each P of ``--parts`` and runs training steps of the roofline model
(tools/bench_roofline.py: Interaction Network, H = 64, 8 steps, shared weights, SiLU, LayerNorm,
checkpointing on) under torchrun, ``--threads`` cores shared by the ranks (P = 1: the whole
graph in one process, no exchange). Per phase, the slowest rank's seconds (the best of the timed
steps): forward, backward (with the recomputation of the checkpointed regions), the halo
exchange (seconds a rank was blocked in exchanges, inside forward and backward; hiding communication
most of an exchange runs behind the interior edges' compute), the gradient all-reduce (with the
wait for the slowest rank's backward pass: the ranks' imbalance) and the optimizer; matmul FLOPs
counted per rank by ``FlopCounterMode`` and summed. Prints markdown rows; ``--record`` puts each
P's step time, the exchange it waits for and the bytes on the current-figures page:

    .venv/bin/python tools/bench_halo_step.py --parts 1 2 --pileup 40
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import torch
from _common import ToolParser, record_table, torchrun

PHASES = ("forward", "backward", "exchange", "all_reduce", "optimizer")


def main() -> None:
    parser = ToolParser(__doc__.split("\n\n")[0], figures="exchange")
    parser.add_argument("--parts", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--pileup", type=float, default=40.0)
    parser.add_argument("--pt-min", type=float, default=0.0)
    parser.add_argument("--threads", type=int, default=2, help="cores shared by the ranks")
    parser.add_argument("--repeats", type=int, default=3, help="timed steps (after a warm-up)")
    parser.add_argument("--precisions", nargs="+", default=["float32", "bf16"])
    parser.add_argument("--fused", choices=["off", "on", "both"], default="on")
    parser.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, default=None, help=argparse.SUPPRESS)
    parser.tiny(parts=[2], pileup=3.0, repeats=1, precisions=["float32"], fused="off")
    args = parser.parse_args()
    if args.worker is not None:
        _worker(args)
        return
    sys.path.insert(0, str(Path(__file__).parent))
    from _event_graph import write_event_graph

    from partgnn.partition.event_split import PartitionOptions
    from partgnn.partition.shard_writer import write_shards

    with tempfile.TemporaryDirectory() as folder:
        graphs = Path(folder) / "graphs.h5"
        nodes, edges = write_event_graph(graphs, pileup=args.pileup, pt_min=args.pt_min)
        print(f"event graph: pile-up {args.pileup:g}, {nodes:,} nodes, {edges:,} edges; "
              f"{os.cpu_count()} cores, {args.threads} threads shared by the ranks, "
              f"torch {torch.__version__}\n")  # fmt: skip
        print("| P | precision | fused | step (s) | forward (s) | backward + recompute (s) "
              "| exchange, blocked (ms) | gradient all-reduce (s) | optimizer (s) "
              "| counted GFLOP (all ranks) | GFLOP/s | forward / backward GFLOP/s "
              "| MB exchanged per step (max rank) | step vs P = 1 |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        single: dict[tuple[str, str], float] = {}
        measurements = []
        for n_parts in args.parts:
            shards = Path(folder) / f"metis{n_parts}"
            write_shards(graphs, shards, PartitionOptions(n_parts=n_parts), progress=False)
            result = Path(folder) / f"result{n_parts}.json"
            command = torchrun(
                n_parts, __file__, "--worker", shards, "--result", result, "--threads",
                str(args.threads), "--repeats", str(args.repeats), "--fused", args.fused,
                "--precisions", *args.precisions,
            )  # fmt: skip
            env = {**os.environ, "OMP_NUM_THREADS": str(max(1, args.threads // n_parts))}
            subprocess.run(command, check=True, env=env)
            for row in json.loads(result.read_text()):
                key = (row["precision"], row["fused"])
                step = sum(row[phase] for phase in ("forward", "backward", "all_reduce",
                                                    "optimizer"))  # fmt: skip
                if n_parts == 1:
                    single[key] = step
                ratio = f"{step / single[key]:.2f}" if key in single else "-"
                flops = row["forward_flops"] + row["backward_flops"]
                print(
                    f"| {n_parts} | {row['precision']} | {row['fused']} | {step:.3f} "
                    f"| {row['forward']:.3f} | {row['backward']:.3f} | {row['exchange'] * 1e3:.1f} "
                    f"| {row['all_reduce']:.3f} | {row['optimizer']:.3f} | {flops / 1e9:.1f} "
                    f"| {flops / step / 1e9:.0f} "
                    f"| {row['forward_flops'] / row['forward'] / 1e9:.0f} / "
                    f"{row['backward_flops'] / row['backward'] / 1e9:.0f} "
                    f"| {row['bytes_sent'] / 1e6:.1f} | {ratio} |",
                    flush=True,
                )
                measurements.append({
                    "parts": n_parts, "precision": row["precision"], "fused": row["fused"],
                    "step_s": step, "exchange_ms": row["exchange"] * 1e3,
                    "mb_exchanged": row["bytes_sent"] / 1e6,
                })  # fmt: skip
    record_table(
        args.record, "halo_step",
        f"A training step of one pile-up-{args.pileup:g} event graph ({nodes:,} nodes, "
        f"{edges:,} edges; METIS) split over P ranks sharing {args.threads} cores: step time, "
        "the exchange time the step waits for (hidden behind interior edges) and MB exchanged "
        "per step by the busiest rank",
        measurements, row_label="P = {parts}", column_label="{precision}, fused {fused}",
        cell="{step_s:.2f} s, {exchange_ms:.1f} ms waited, {mb_exchanged:.1f} MB",
    )  # fmt: skip


def _worker(args: argparse.Namespace) -> None:
    from torch.utils.flop_counter import FlopCounterMode

    from partgnn.distributed.communication_counter import CommunicationCounter
    from partgnn.distributed.exchange_plan import ExchangePlan
    from partgnn.distributed.gradients import GradientCombination, all_reduce_gradients
    from partgnn.distributed.halo_exchange import HaloExchanger
    from partgnn.distributed.process_group import destroy_distributed, init_distributed
    from partgnn.models.compute_policy import ComputePolicy
    from partgnn.models.interaction_network import InteractionNetwork
    from partgnn.partition.shard_reader import ShardDirectory
    from partgnn.train.loss import edge_loss

    context = init_distributed(device="cpu", timeout_s=600)
    torch.set_num_threads(max(1, args.threads // context.group_size))
    with ShardDirectory(args.worker, world_size=context.group_size).open_rank(
        context.group_rank
    ) as s:
        event = s[0]
    graph = event.graph
    owned = torch.from_numpy(event.plan.edge_owned)
    y = graph.y[owned].float()
    variants = {"off": [False], "on": [True], "both": [False, True]}[args.fused]
    rows = []
    for precision, fused in itertools.product(args.precisions, variants):
        counter = CommunicationCounter()
        exchange = None
        if context.group_size > 1:
            exchange = HaloExchanger(ExchangePlan.from_halo_plan(event.plan), context,
                                     counter=counter, hide_communication=True)  # fmt: skip
        torch.manual_seed(0)
        model = InteractionNetwork(
            node_features=graph.x.shape[1], edge_features=graph.edge_attr.shape[1], hidden=64,
            steps=8, activation="silu", shared_weights=True,
            compute=ComputePolicy(recompute=True, fused=fused),
        )  # fmt: skip
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        autocast = precision == "bf16"
        best = dict.fromkeys(PHASES, float("inf"))
        flops: dict[str, float] = {}
        for repeat in range(args.repeats + 1):
            optimizer.zero_grad()
            counter.reset()
            counting = FlopCounterMode(display=False) if repeat == 0 else None
            torch.distributed.barrier(group=context.group)
            with counting or nullcontext():
                start = time.perf_counter()
                with torch.autocast("cpu", dtype=torch.bfloat16) if autocast else nullcontext():
                    logits = model(graph.x, graph.edge_index, graph.edge_attr, exchange=exchange)
                loss = edge_loss(logits[owned].float(), y, 1.0, float(event.n_global_edges))
                forward = time.perf_counter() - start
                if counting is not None:
                    flops["forward_flops"] = counting.get_total_flops()
                start = time.perf_counter()
                loss.backward()
                backward = time.perf_counter() - start
                if counting is not None:
                    flops["backward_flops"] = counting.get_total_flops() - flops["forward_flops"]
            start = time.perf_counter()
            all_reduce_gradients(
                model.parameters(), context, combination=GradientCombination.GRAPH_SUM
            )
            all_reduce = time.perf_counter() - start
            start = time.perf_counter()
            optimizer.step()
            times = {
                "forward": forward, "backward": backward, "exchange": counter.blocked_seconds,
                "all_reduce": all_reduce, "optimizer": time.perf_counter() - start,
            }  # fmt: skip
            if repeat:  # the first step warms up (and counts)
                best = {phase: min(best[phase], times[phase]) for phase in PHASES}
        slowest = torch.tensor([best[phase] for phase in PHASES] + [counter.bytes_sent / 1.0])
        torch.distributed.all_reduce(slowest, op=torch.distributed.ReduceOp.MAX,
                                     group=context.group)  # fmt: skip
        total_flops = torch.tensor([flops["forward_flops"], flops["backward_flops"]],
                                   dtype=torch.float64)  # fmt: skip
        torch.distributed.all_reduce(total_flops, group=context.group)
        rows.append({
            "precision": precision, "fused": "on" if fused else "off",
            **dict(zip(PHASES, slowest[:-1].tolist(), strict=True)),
            "bytes_sent": slowest[-1].item(),
            "forward_flops": total_flops[0].item(), "backward_flops": total_flops[1].item(),
        })  # fmt: skip
    if context.is_main:
        args.result.write_text(json.dumps(rows))
    destroy_distributed(context)


if __name__ == "__main__":
    main()
