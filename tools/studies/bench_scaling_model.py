"""Several GPUs on paper: one graph's step time on P GPUs, modelled from one (issue 49, item 4).

Until machines with several GPUs are lent, strong scaling is predicted from what one device
measures. The tool simulates one event (``--pileup``, every hit unless ``--pt-min``), builds its
graph, and for each P of ``--parts`` partitions it with METIS (work weights) and steps every
rank's local graph alone on this process's device, one rank after the other (a loop-back halo
exchange: a rank's time is its own compute and kernel launches; tools/_rank_step.py); the halo
plans give the rows each exchange moves. The model of one training step on P GPUs::

    t_P = max_r t_r + X * (alpha + max_r B_r / beta) + t_allreduce

``t_r`` rank r's measured step; ``X = 2 (steps + 1)`` halo exchanges per step (one per
message-passing step and one before the head, forward, and as many reverse ones backward);
``B_r`` the bytes rank r sends or receives in one (the larger; rows x hidden x bytes per value);
``alpha`` the latency of an NCCL point-to-point exchange and ``beta`` the bandwidth per
direction of the link (``--link``); ``t_allreduce`` the ring all-reduce of the gradients
(``2 (P - 1) / P`` of their bytes over ``beta`` plus ``2 (P - 1) alpha``). With the exchange
hidden behind the interior edges (``run.hide_communication``) the step is at best ``max_r t_r +
t_allreduce`` (the "hidden" column). Strong-scaling efficiency ``t_1 / (P t_P)``; the row names
what limits it. The check a single device can make: the ranks' compute run in turn, ``sum_r t_r``
against ``t_1`` (the work the partition adds: halo nodes, edges held twice, each rank's own
launches).

Link figures (published; per direction):

- ``nvlink``: H100 SXM NVLink 4, 900 GB/s both directions = 450 GB/s per direction (NVIDIA's
  H100 SXM figures, e.g. https://gpu.blog/gpus/nvidia-h100-sxm); NCCL point-to-point latency
  ~4 us between NVLink GPUs (send/recv 3.7 us on 4 H800s over NVLink,
  https://github.com/NVIDIA/nccl/issues/1984; 6 us for a 2-GPU H100 all-reduce,
  https://github.com/NVIDIA/nccl/issues/1259).
- ``ndr``: InfiniBand NDR between nodes, one ConnectX-7 port per GPU, 400 Gb/s = 50 GB/s
  (https://docs.nvidia.com/networking/display/ConnectX7VPI/Introduction); latency ~15 us
  (NCCL's tuning model: ring base latency 8.4 us plus the network's per-hop latency,
  src/graph/tuning.cc, quoted in https://github.com/NVIDIA/nccl/issues/1334).

::

    OMP_NUM_THREADS=2 .venv/bin/python tools/studies/bench_scaling_model.py --pileup 200 \\
        --parts 1 2 4
    python3 tools/studies/bench_scaling_model.py --device cuda --pileup 600 --parts 1 2 4 8 \\
        --out OUT/s
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

# tools/: the helpers the studies share with the benchmarks (_common, _paths, _rank_step).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import ToolParser, markdown_table
from _rank_step import RankStep

from partgnn.data.detector.geometry import default_geometry
from partgnn.data.graphs.graph_builder import GraphBuildConfig, build_event_graph
from partgnn.data.simulation.simulate import SimulationConfig, simulate_event
from partgnn.models.build import build_model
from partgnn.models.config import ModelConfig
from partgnn.partition.halo_plan import build_halo_plans
from partgnn.partition.metis import metis_partition

#: Link bandwidth per direction [bytes/s] and point-to-point latency [s] (module docstring).
LINKS: dict[str, tuple[float, float]] = {
    "nvlink": (450e9, 4e-6),
    "ndr": (50e9, 15e-6),
}


@dataclass(frozen=True)
class Partition:
    """One P's measurements: each rank's counts, step seconds and exchange rows."""

    parts: int
    edges: list[int]
    owned: list[int]
    halo: list[int]
    sent: list[int]
    seconds: list[float]
    captured: bool = False


def main() -> None:
    parser = ToolParser(__doc__)
    parser.add_argument("--out", type=Path, default=None, help="write scaling.json and .md")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--pileup", type=float, default=200.0)
    parser.add_argument("--pt-min", type=float, default=0.0)
    parser.add_argument("--parts", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--steps", type=int, default=8, help="message-passing steps")
    parser.add_argument("--precision", choices=["float32", "bf16"], default="float32")
    parser.add_argument("--repeats", type=int, default=3, help="timed steps per rank (median)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--captured", action="store_true",
        help="also time each rank's step replayed as a CUDA graph (a GPU only) and model it",
    )  # fmt: skip
    parser.tiny(pileup=3.0, parts=[1, 2], hidden=8, steps=2, repeats=1)
    args = parser.parse_args()
    if 1 not in args.parts:
        parser.error("--parts needs 1 (the one-GPU step the others are compared with)")
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    geometry = default_geometry()
    event = simulate_event(geometry, SimulationConfig(pileup=args.pileup), event_id=0, seed=1)
    graph = build_event_graph(event, geometry, GraphBuildConfig(pt_min=args.pt_min))[0]
    n_edges = int(graph.edge_index.shape[1])
    print(f"pile-up {args.pileup:g}: {graph.num_nodes:,} nodes, {n_edges:,} edges; "
          f"{device}, H = {args.hidden}, {args.steps} steps, {args.precision}, recompute on",
          flush=True)  # fmt: skip
    config = ModelConfig(hidden=args.hidden, steps=args.steps, activation="silu",
                         shared_weights=True, recompute=True)  # fmt: skip
    if args.captured and device.type != "cuda":
        print(f"--captured: no CUDA graphs on {device}: the steps run uncaptured only", flush=True)
    captures = (False, True) if args.captured and device.type == "cuda" else (False,)
    partitions = [
        _measure(graph, parts, config, device, args.precision == "bf16", args.repeats, captured)
        for captured in captures
        for parts in sorted(args.parts)
    ]
    value_bytes = 2 if args.precision == "bf16" else 4
    model = build_model(config, graph.x.shape[1], graph.edge_attr.shape[1])
    n_parameters = sum(p.numel() for p in model.parameters())
    ones = {p.captured: p for p in partitions if p.parts == 1}
    rows = [_model(p, ones[p.captured], args.hidden * value_bytes, 2 * (args.steps + 1),
                   4 * n_parameters, link) for link in LINKS for p in partitions]  # fmt: skip
    result = {"command": " ".join(["bench_scaling_model.py", *sys.argv[1:]]),
              "date": time.strftime("%Y-%m-%d"), "device": _device_name(device),
              "torch": torch.__version__, "nodes": graph.num_nodes, "edges": n_edges,
              "partitions": [asdict(p) for p in partitions], "model": rows}  # fmt: skip
    text = markdown(result)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "scaling.json").write_text(json.dumps(result, indent=1))
        (args.out / "scaling.md").write_text(text)


def _whole(graph):
    """The halo plan of the whole graph (one part)."""
    part = torch.zeros(graph.num_nodes, dtype=torch.long).numpy()
    return build_halo_plans(graph.edge_index.numpy(), part, 1)[0]


def _measure(
    graph, parts: int, config: ModelConfig, device: torch.device, bf16: bool, repeats: int,
    captured: bool = False,
) -> Partition:  # fmt: skip
    """Each rank's step seconds (median of ``repeats``, ranks in turn; ``captured``: replayed
    as a CUDA graph) and counts."""
    if parts == 1:
        plans = [_whole(graph)]
    else:
        part = metis_partition(graph.edge_index, graph.num_nodes, parts, vertex_weights="work")
        plans = build_halo_plans(graph.edge_index.numpy(), part, parts)
    seconds: list[list[float]] = [[] for _ in plans]
    for rank, plan in enumerate(plans):  # one rank's model and graph on the device at a time
        step = RankStep(graph, plan, config, device, bf16)
        run = step.captured() if captured else step
        for repeat in range(repeats + 1):  # the first warms up
            start = time.perf_counter()
            run()
            if repeat:
                seconds[rank].append(time.perf_counter() - start)
        del step, run
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return Partition(
        parts=parts,
        edges=[int(p.edge_index.shape[1]) for p in plans],
        owned=[p.n_owned for p in plans],
        halo=[p.n_halo for p in plans],
        sent=[int(p.send_counts.sum()) for p in plans],
        seconds=[statistics.median(s) for s in seconds],
        captured=captured,
    )


def _model(
    partition: Partition, one: Partition, row_bytes: int, exchanges: int, gradient_bytes: int,
    link: str,
) -> dict:  # fmt: skip
    """The predicted step on ``partition.parts`` GPUs joined by ``link``, and what limits it."""
    bandwidth, latency = LINKS[link]
    parts = partition.parts
    compute = max(partition.seconds)
    moved = max(max(h, s) for h, s in zip(partition.halo, partition.sent, strict=True))
    exchange = 0.0 if parts == 1 else exchanges * (latency + moved * row_bytes / bandwidth)
    allreduce = 0.0
    if parts > 1:
        allreduce = 2 * (parts - 1) / parts * gradient_bytes / bandwidth + 2 * (parts - 1) * latency
    t1 = one.seconds[0]
    step = compute + exchange + allreduce
    hidden = compute + allreduce
    serial = sum(partition.seconds)
    parts_exchange = {"exchange": exchange, "all-reduce": allreduce}
    overheads = {
        "rank imbalance": compute - serial / parts,
        "partition's extra work": serial / parts - t1 / parts,
        **parts_exchange,
    }
    limit = max(overheads, key=overheads.get) if parts > 1 else "-"
    return {
        "link": link, "parts": parts, "captured": partition.captured, "compute_s": compute,
        "exchange_s": exchange,
        "allreduce_s": allreduce, "step_s": step, "hidden_step_s": hidden,
        "efficiency": t1 / (parts * step), "hidden_efficiency": t1 / (parts * hidden),
        "serial_over_one": serial / t1, "imbalance": compute / (serial / parts),
        "bytes_per_exchange": moved * row_bytes, "limit": limit,
    }  # fmt: skip


def markdown(result: dict) -> str:
    """The measured ranks and the predicted scaling, as markdown."""
    lines = [
        f"Command: `{result['command']}`; {result['device']}, torch {result['torch']}, "
        f"{result['date']}; graph of {result['nodes']:,} nodes, {result['edges']:,} edges.",
        "",
        markdown_table(
            [
                "P",
                "CUDA graph",
                "edges per rank (max)",
                "halo rows (max)",
                "rank seconds",
                "sum / t1",
            ],
            [
                [
                    p["parts"],
                    "yes" if p.get("captured") else "no",
                    f"{max(p['edges']):,}",
                    f"{max(p['halo']):,}",
                    " / ".join(f"{s:.3f}" for s in p["seconds"]),
                    f"{sum(p['seconds']) / _one(result, p.get('captured', False)):.2f}",
                ]
                for p in result["partitions"]
            ],
        ),
        "",
        markdown_table(
            [
                "link",
                "P",
                "CUDA graph",
                "t_P s",
                "efficiency t1/(P tP)",
                "exchange hidden: efficiency",
                "MB per exchange",
                "limited by",
            ],
            [
                [
                    r["link"],
                    r["parts"],
                    "yes" if r.get("captured") else "no",
                    f"{r['step_s']:.3f}",
                    f"{r['efficiency']:.2f}",
                    f"{r['hidden_efficiency']:.2f}",
                    f"{r['bytes_per_exchange'] / 1e6:.2f}",
                    r["limit"],
                ]
                for r in result["model"]
            ],
        ),
    ]
    return "\n".join(lines) + "\n"


def _one(result: dict, captured: bool) -> float:
    """The one-GPU step's seconds, captured or not."""
    return next(
        p["seconds"][0]
        for p in result["partitions"]
        if p["parts"] == 1 and p.get("captured", False) == captured
    )


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "CPU"


if __name__ == "__main__":
    main()
