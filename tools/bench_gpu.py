"""The figures a GPU user asks for, measured on one GPU in one process (issue 38).

- ``peer``: acorn's InteractionGNN (the peer harness's model, ``--peer-dir PEER``: its stubs, the
  real model source from ``--acorn-src``) and partgnn's Interaction Network on the same random
  graphs (``--edges``, nodes = edges / 10, 3 node features) with the same hyper-parameters
  (``--hidden``, 8 iterations, 2-layer MLPs, SiLU, LayerNorm, sum aggregation, shared weights),
  float32 and bf16 autocast; partgnn with recomputation on and off, each with and
  without ``model.fused`` (on a GPU: LayerNorm + activation compiled by torch.compile, sums by
  ``embedding_bag``), the peer as it runs (recomputation always on). Then the reference's own
  model, acorn's InteractionGNN2 with its CTD 2023 settings (hidden 128, 3-layer MLPs, BatchNorm,
  ReLU, concat, separate weights per
  iteration), beside partgnn's reference-style model (``model.batch_norm``,
  ``model.concat_initial``) on the largest graph, recomputation on and off.
- ``largest``: the largest graph one GPU trains (hidden 64, recomputation, bf16, mode full):
  ``partgnn plan``'s measured footprint on this GPU says how many edges fit in 85 % of its free
  memory (nodes per edge of a pile-up-200 event graph); then 2 training steps on a
  random graph of that size: the prediction beside the peak and the step time.
- ``score``: ``pretrained:trackml-full`` scoring pile-up-200 event graphs (no pT cut), built by
  ``--map`` (the model's own construction: ``pretrained:trackml-full``, whose map ships with
  the package), else by the geometric
  builder (~1.8M edges, not what the model was trained on: it warns)
  one at a time in one process: seconds and peak memory per event (the first is a warm-up).

Step time: the median of ``--steps`` steps after one warm-up step, the GPU synchronised.
Memory: peak allocated and reserved bytes over the warm-up and timed steps, above what the graph
and the model held before them (gradients, optimizer state, activations, temporaries). Writes
``OUT/gpu_bench.json`` and ``OUT/gpu_bench.md``::

    python3 tools/bench_gpu.py --out gpu-bench --acorn-src /tmp/acorn-src
    .venv/bin/python tools/bench_gpu.py --out /tmp/b --device cpu --tiny   # a dry run here
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from _common import ToolParser
from _step_models import (
    PEER_DIR,
    load_peer,
    partgnn_model,
    partgnn_run,
    peer_model,
    random_graph,
    reference_model,
    training_step,
)

PARTS = ("peer", "largest", "score", "profile")
#: Nodes per edge of the pile-up-200 event graph (geometric, no pT cut: 132,961 / 1,768,648).
EVENT_NODES_PER_EDGE = 132_961 / 1_768_648
#: Share of the GPU's free memory the largest graph's predicted peak may take.
FILL = 0.85


def main() -> None:
    parser = ToolParser(__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--acorn-src", type=Path, default=Path("/tmp/acorn-src"))
    parser.add_argument("--peer-dir", type=Path, default=PEER_DIR)
    parser.add_argument("--edges", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--hidden", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--steps", type=int, default=3, help="timed steps per setting")
    parser.add_argument("--largest-edges", type=int, help="train this many edges instead")
    parser.add_argument("--events", type=int, default=3, help="events to score")
    parser.add_argument("--pileup", type=float, default=200.0)
    parser.add_argument("--map", default=None, help="module map the scored graphs are built by")
    parser.tiny(edges=[2000, 4000], hidden=[8], steps=1, events=2, pileup=2.0,
                largest_edges=20_000)  # fmt: skip
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_gpu: no CUDA GPU on this machine")
    device = torch.device(args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict = {"machine": _machine(device), "date": time.strftime("%Y-%m-%d"),
                    "command": " ".join(["bench_gpu.py", *sys.argv[1:]])}  # fmt: skip
    for part in args.parts:
        started = time.perf_counter()
        result[part] = globals()[f"_{part}"](args, device)
        print(f"bench_gpu: {part} done ({time.perf_counter() - started:.0f} s)", flush=True)
        (args.out / "gpu_bench.json").write_text(json.dumps(result, indent=2))
    (args.out / "gpu_bench.md").write_text(markdown(result))
    print(markdown(result))


# ----------------------------------------------------------------------------------- peer


def _peer(args: argparse.Namespace, device: torch.device) -> list[dict]:
    load_peer(args.acorn_src, args.peer_dir)
    rows = []
    for edges in args.edges:
        graph = random_graph(edges // 10, edges, device)
        for hidden in args.hidden:
            for precision in ("float32", "bf16"):
                settings = {"edges": edges, "hidden": hidden, "precision": precision}
                peer = _measure(*peer_model(graph, hidden), graph, device, args.steps, precision)
                rows.append({**settings, "model": "acorn InteractionGNN (recomputation)", **peer})
                for checkpoint, fused in ((True, False), (True, True), (False, False),
                                          (False, True)):  # fmt: skip
                    model = partgnn_model(hidden, checkpoint, reference=False, fused=fused)
                    ours = _measure(*partgnn_run(model, graph), graph, device, args.steps,
                                    precision)  # fmt: skip
                    name = f"partgnn (recompute {'on' if checkpoint else 'off'}{', fused' * fused})"
                    rows.append({**settings, "model": name, **ours, **_ratios(ours, peer)})
    edges, hidden = max(args.edges), max(args.hidden)
    graph = random_graph(edges // 10, edges, device)
    for precision in ("float32", "bf16"):
        settings = {"edges": edges, "hidden": hidden, "precision": precision}
        for checkpoint in (True, False):
            on = "on" if checkpoint else "off"
            peer = _measure(*reference_model(graph, hidden, checkpoint), graph, device,
                            args.steps, precision)  # fmt: skip
            rows.append({**settings, "model": f"acorn InteractionGNN2 CTD 2023 (recompute {on})",
                         **peer})  # fmt: skip
            model = partgnn_model(hidden, checkpoint, reference=True)
            ours = _measure(*partgnn_run(model, graph, reference=True), graph, device,
                            args.steps, precision)  # fmt: skip
            rows.append({**settings, "model": f"partgnn reference-style (recompute {on})", **ours,
                         **_ratios(ours, peer)})  # fmt: skip
    return rows


def _measure(
    model: torch.nn.Module, logits: Callable, graph: dict, device: torch.device, steps: int,
    precision: str,
) -> dict:  # fmt: skip
    """Median step time of ``steps`` AdamW steps (BCE with logits) after one warm-up step, and
    their peak memory above what the graph and the model held before the warm-up."""
    _release(device)  # the settings before: their models and tensors are garbage by now
    step = training_step(model, logits, graph["y"], device, precision)

    try:
        start = _memory(device)  # the graph and the model; the warm-up step makes the rest
        _reset_peak(device)
        step()
        _synchronize(device)
        times = []
        for _ in range(steps):
            started = time.perf_counter()
            step()
            _synchronize(device)
            times.append(time.perf_counter() - started)
        peak = _peak(device)
        row = {"step_s": statistics.median(times),
               "peak_allocated_mb": (peak[0] - start[0]) / 2**20,
               "peak_reserved_mb": (peak[1] - start[1]) / 2**20}  # fmt: skip
    except torch.OutOfMemoryError as err:
        row = {"error": f"out of memory: {str(err).splitlines()[0][:160]}"}
    print(json.dumps(row), flush=True)
    return row


def _ratios(ours: dict, peer: dict) -> dict:
    if "step_s" not in ours or "step_s" not in peer:
        return {}
    allocated = ours["peak_allocated_mb"] / max(peer["peak_allocated_mb"], 1e-9)
    return {"step_vs_peer": ours["step_s"] / peer["step_s"], "allocated_vs_peer": allocated}


def _profile(args: argparse.Namespace, device: torch.device) -> list[dict]:
    """The kernels of one partgnn step (recomputation on, ``model.fused``, the largest graph, the
    smallest width), float32 and bf16: the ops that take the most device time, and the step's
    kernel launches."""
    from torch.profiler import ProfilerActivity, profile

    edges, hidden = max(args.edges), min(args.hidden)
    graph = random_graph(edges // 10, edges, device)
    rows = []
    for precision in ("float32", "bf16"):
        model = partgnn_model(hidden, True, reference=False, fused=True)
        model, logits = partgnn_run(model, graph)
        step = training_step(model, logits, graph["y"], device, precision)
        step()
        _synchronize(device)
        activities = [ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        with profile(activities=activities) as profiler:
            step()
            _synchronize(device)
        key = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
        table = profiler.key_averages().table(sort_by=key, row_limit=25)
        (args.out / f"profile-{precision}.txt").write_text(table)
        kernels = sum(e.count for e in profiler.key_averages() if e.device_type.name == "CUDA")
        rows.append({"precision": precision, "edges": edges, "hidden": hidden,
                     "kernels": kernels})  # fmt: skip
        print(table[:6000], flush=True)
        _release(device)
    return rows


# --------------------------------------------------------------------------------- largest


def _largest(args: argparse.Namespace, device: torch.device) -> dict:
    from partgnn.data.graphs.graph_fields import EventShape
    from partgnn.models.build import build_model
    from partgnn.train.config.sections import TrainConfig
    from partgnn.train.planning.footprint import measure_footprint, random_train_item
    from partgnn.train.planning.rank_memory import ItemSize
    from partgnn.train.step import StepSettings, forward_backward

    config = TrainConfig(mode="full")
    config.model.hidden, config.model.recompute = 64, True
    config.run.bf16, config.run.device = True, device.type
    started = time.perf_counter()
    footprint = measure_footprint(config, 3, 4, device)
    plan_s = time.perf_counter() - started
    item_size = ItemSize.of(config, 3, 4)

    def predicted(edges: int) -> float:
        """The planner's bytes: the item's tensors and one step's."""
        nodes = int(edges * EVENT_NODES_PER_EDGE)
        return item_size.bytes(EventShape(nodes, edges, 0, 0)) + footprint.bytes(nodes, edges)

    free = _free_bytes(device)
    edges = args.largest_edges
    if edges is None:
        low, high = 1, 10**11
        while high - low > 10**5:  # the largest edge count whose prediction fits
            middle = (low + high) // 2
            low, high = (middle, high) if predicted(middle) <= FILL * free else (low, middle)
        edges = low
    nodes = int(edges * EVENT_NODES_PER_EDGE)
    row: dict = {"plan_s": plan_s, "free_mb": free / 2**20, "edges": edges, "nodes": nodes,
                 "predicted_mb": predicted(edges) / 2**20,
                 "per_edge_bytes": footprint.per_edge * footprint.factor(edges)}  # fmt: skip
    try:
        generator = torch.Generator(device=device).manual_seed(0)
        _reset_peak(device)
        start = _memory(device)
        item = random_train_item(config, 3, 4, device, nodes, edges, generator)
        settings = StepSettings.of(config)
        model = build_model(config.model, 3, 4).to(device, settings.dtype)
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.optim.lr)
        times = []
        for _ in range(2):
            started = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            forward_backward(model, item, settings)
            optimizer.step()
            _synchronize(device)
            times.append(time.perf_counter() - started)
        peak = _peak(device)
        row.update(step_s=times, peak_allocated_mb=(peak[0] - start[0]) / 2**20,
                   peak_reserved_mb=(peak[1] - start[1]) / 2**20)  # fmt: skip
    except torch.OutOfMemoryError as err:
        row["error"] = f"out of memory: {str(err).splitlines()[0][:200]}"
    _release(device)
    print(json.dumps(row), flush=True)
    return row


# ----------------------------------------------------------------------------------- score


def _score(args: argparse.Namespace, device: torch.device) -> list[dict]:
    from partgnn.data.detector.geometry import default_geometry
    from partgnn.data.files.h5_files import file_sha256
    from partgnn.data.files.writers import write_graphs
    from partgnn.data.graphs.event_graphs import node_clusters
    from partgnn.data.graphs.graph_builder import GraphBuildConfig, build_event_graph
    from partgnn.data.module_map.map_file import ModuleMap
    from partgnn.data.module_map.pretrained_maps import resolve_map
    from partgnn.data.simulation.simulate import SimulationConfig, simulate_event
    from partgnn.train.inference import score_graphs

    graphs = args.out / ("score-graphs-map.h5" if args.map else "score-graphs.h5")
    if not graphs.exists():
        geometry = default_geometry()
        map_file = resolve_map(args.map) if args.map else None
        module_map = ModuleMap.load(map_file) if map_file else None
        provenance = {"method": "module-map", "module_map_sha256": file_sha256(map_file)
                      } if map_file else {}  # fmt: skip
        events = (simulate_event(geometry, SimulationConfig(pileup=args.pileup), event_id=i,
                                 seed=3) for i in range(args.events))  # fmt: skip
        built = ((e, *build_event_graph(e, geometry, GraphBuildConfig(pt_min=0.0), module_map))
                 for e in events)  # fmt: skip
        # each graph keeps its hits' cluster features (the model reads them), as build-graphs
        write_graphs(graphs, ((g, q.to_dict(), node_clusters(e, geometry, g.hit_id.numpy()))
                              for e, g, q in built), provenance=provenance)  # fmt: skip
    rows = []
    _reset_peak(device)
    start = _memory(device)
    started = time.perf_counter()
    for index, (event_id, scores) in enumerate(
        score_graphs("pretrained:trackml-full", graphs, device)
    ):
        _synchronize(device)
        now = time.perf_counter()
        peak = _peak(device)
        rows.append({"event": event_id, "edges": len(scores), "warm_up": index == 0,
                     "seconds": now - started,
                     "peak_allocated_mb": (peak[0] - start[0]) / 2**20,
                     "peak_reserved_mb": (peak[1] - start[1]) / 2**20})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
        started = time.perf_counter()
    return rows


# --------------------------------------------------------------------------------- helpers


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _memory(device: torch.device) -> tuple[int, int]:
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device)
    return 0, 0


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _peak(device: torch.device) -> tuple[int, int]:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device), torch.cuda.max_memory_reserved(device)
    return 0, 0


def _release(device: torch.device) -> None:
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _free_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    import psutil

    return psutil.virtual_memory().available


def _machine(device: torch.device) -> str:
    if device.type == "cuda":
        return (f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}, "
                f"CUDA {torch.version.cuda}")  # fmt: skip
    return f"CPU, torch {torch.__version__}"


def markdown(result: dict) -> str:
    """The figures as markdown tables."""
    lines = [f"Machine: {result['machine']}; {result['date']}; `{result['command']}`.", ""]
    if result.get("peer"):
        lines += ["| edges | hidden | precision | model | step s | x peer | peak allocated MiB "
                  "| x peer | peak reserved MiB |",
                  "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for r in result["peer"]:
            lines.append(
                f"| {r['edges']:,} | {r['hidden']} | {r['precision']} | {r['model']} | "
                f"{_cell(r, 'step_s', '.4f')} | {_cell(r, 'step_vs_peer', '.2f')} | "
                f"{_cell(r, 'peak_allocated_mb', '.0f')} | {_cell(r, 'allocated_vs_peer', '.2f')} "
                f"| {_cell(r, 'peak_reserved_mb', '.0f')} |"
            )
        lines.append("")
    if result.get("largest"):
        r = result["largest"]
        steps = " / ".join(f"{s:.2f}" for s in r.get("step_s", []))
        lines += [
            f"Largest graph (hidden 64, recomputation, bf16, mode full): {r['edges']:,} edges, "
            f"{r['nodes']:,} nodes; planned {r['predicted_mb']:.0f} MiB of {r['free_mb']:.0f} "
            f"free (footprint measured in {r['plan_s']:.0f} s); "
            + (f"2 steps {steps} s, peak allocated {r['peak_allocated_mb']:.0f} MiB, reserved "
               f"{r['peak_reserved_mb']:.0f} MiB" if "error" not in r else r["error"]),
            "",
        ]  # fmt: skip
    if result.get("score"):
        lines += ["| event | edges | seconds | peak allocated MiB | peak reserved MiB |",
                  "|---|---|---|---|---|"]  # fmt: skip
        for r in result["score"]:
            lines.append(f"| {r['event']}{' (warm-up)' if r['warm_up'] else ''} | {r['edges']:,} "
                         f"| {r['seconds']:.3f} | {r['peak_allocated_mb']:.0f} | "
                         f"{r['peak_reserved_mb']:.0f} |")  # fmt: skip
        lines.append("")
    return "\n".join(lines)


def _cell(row: dict, key: str, spec: str) -> str:
    return "-" if key not in row else format(row[key], spec)


if __name__ == "__main__":
    main()
