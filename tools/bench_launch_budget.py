"""The launch budget of one training step, counted on the CPU (issue 49).

A GPU step whose kernels are small is bound by the host issuing them, one launch per operation: it
does not get faster when a graph is split over GPUs. This tool counts the aten operations one
training step dispatches below autograd, views left out (forward, backward with its recomputation,
the AdamW step; each is about one kernel launch on a GPU), for partgnn's Interaction Network and the
peer's model (acorn's InteractionGNN through the peer harness, ``--peer-dir PEER``: the reference)
on the same random graph, taking the code paths a GPU takes: the chunks of edges a GPU of
``--gpu-memory-gb`` gets by default (or ``--chunk-edges``), AdamW's multi-tensor implementation
(CUDA's default), and with ``model.fused`` (``--fused``) the fused LayerNorm + activation compiled
as on a GPU (:func:`~partgnn.models.kernel_choice.gpu_kernel_paths`: one operator forward, one
backward; inductor's C++ here, Triton there), not the C++ CPU kernels. Per setting it gives the
operations by phase, the LayerNorm rows normalised, the peak of live tensor bytes during the step
(the C heap, :class:`~partgnn.memory.meters.HeapMeter`) and, on a tiny graph (``--tiny-edges``), the
step time, which there is the per-operation overhead (the median of ``--rounds`` rounds of every
model in turn). ``--breakdown`` says where partgnn's operations come from, by difference: per
message-passing step, per MLP layer, per chunk of edges. Writes ``OUT/launch_budget.json`` and
``.md``; ``--record`` puts the figures on the current-figures page::

    OMP_NUM_THREADS=2 .venv/bin/python tools/bench_launch_budget.py --out budget \\
        --acorn-src .peer/acorn-src --peer-dir PEER
    .venv/bin/python tools/bench_launch_budget.py --out /tmp/b --tiny --no-reference
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import torch
from _common import ON_OFF_CHOICES, ToolParser, on_off_settings, record_table
from _step_models import (
    PEER_DIR,
    load_peer,
    partgnn_model,
    partgnn_run,
    peer_model,
    random_graph,
    training_step,
)
from torch.utils._python_dispatch import TorchDispatchMode

from partgnn.memory.meters import HeapMeter, heap_meter_available
from partgnn.models.chunk_size import CHUNK_VALUES_PER_EDGE, GPU_CHUNK_SHARE
from partgnn.models.kernel_choice import gpu_kernel_paths

#: Operations listed per setting: those dispatched most.
TOP_OPERATIONS = 8
REFERENCE = "reference (acorn InteractionGNN, recomputed)"
#: Operations that normalise rows (forward passes and recomputations; the fused operator's
#: forward when it normalises; backward passes are not counted, as for the reference's
#: ``native_layer_norm_backward``).
LAYER_NORMS = ("aten.native_layer_norm", "partgnn_compiled.norm_activation_forward")
#: Operations that launch no kernel on a GPU: reading a CPU scalar (AdamW's step counters stay
#: on the CPU) and the profiler's markers.
NOT_KERNELS = frozenset({"aten._local_scalar_dense", "profiler._record_function_enter_new",
                         "profiler._record_function_exit"})  # fmt: skip


class OperationCounter(TorchDispatchMode):
    """Counts the aten operations dispatched inside it that are not views (nor
    :data:`NOT_KERNELS`), by name (``aten.mm``...) and by phase (:meth:`phase`): each launches a
    kernel on a GPU (an allocation without a fill, such as ``aten.empty``, is counted too).
    Also sums the rows LayerNorm normalises (forward passes and recomputations)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()
        self.phases: Counter[str] = Counter()
        self.current = "before"
        self.layer_norm_rows = 0

    def phase(self, name: str) -> None:
        self.current = name

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        # A view (t, slice, detach...) launches no kernel.
        if not func.is_view and name not in NOT_KERNELS:
            self.counts[name] += 1
            self.phases[self.current] += 1
            if name in LAYER_NORMS and _normalises(name, args):
                self.layer_norm_rows += args[0].numel() // args[0].shape[-1]
        return func(*args, **(kwargs or {}))


def _normalises(name: str, args: tuple) -> bool:
    """Whether a :data:`LAYER_NORMS` operation normalises (the fused one: its ``norm`` flag)."""
    return name == "aten.native_layer_norm" or bool(args[5])


def count_step(step: Callable[..., None]) -> OperationCounter:
    """The operations of one call of ``step`` (after a warm-up call, which builds AdamW's
    state)."""
    step()
    with OperationCounter() as counter:
        step(counter.phase)
    return counter


def peak_bytes(step: Callable[..., None]) -> int | None:
    """Most live tensor bytes during one call of ``step`` above those before it (``None``
    without glibc's heap meter)."""
    if not heap_meter_available():
        return None
    step()
    with HeapMeter() as meter:
        step()
    return meter.peak


def step_seconds(step: Callable[..., None], repeats: int) -> float:
    """Median seconds of ``repeats`` calls of ``step`` after one warm-up call."""
    step()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def chunk_mb(args, hidden: int) -> float:
    """``model.chunk_mb`` as on the GPU (or for ``--chunk-edges`` edges per chunk)."""
    if args.chunk_edges:
        per_edge = CHUNK_VALUES_PER_EDGE * hidden * 4
        return (args.chunk_edges * per_edge + 0.5) / 1e6
    return GPU_CHUNK_SHARE * args.gpu_memory_gb * 1e3


def main() -> None:
    parser = ToolParser(__doc__, figures="launch_budget")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--acorn-src", type=Path, default=Path("/tmp/acorn-src"))
    parser.add_argument("--peer-dir", type=Path, default=PEER_DIR)
    parser.add_argument("--edges", type=int, nargs="*", default=[100_000, 1_000_000],
                        help="the counted graphs (none: the tiny graph alone)")  # fmt: skip
    parser.add_argument("--hidden", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--precisions", nargs="+", choices=["float32", "bf16"],
                        default=["float32", "bf16"])  # fmt: skip
    parser.add_argument("--gpu-memory-gb", type=float, default=80.0,
                        help="the GPU whose default chunks are taken (80: an H100)")  # fmt: skip
    parser.add_argument("--chunk-edges", type=int, default=None,
                        help="chunks of this many edges (65536: before issue 49)")  # fmt: skip
    parser.add_argument("--tiny-edges", type=int, default=2000, help="the per-operation graph")
    parser.add_argument("--repeats", type=int, default=5, help="timed tiny-graph steps")
    parser.add_argument("--rounds", type=int, default=5,
                        help="tiny-graph rounds, every model in turn (the median)")  # fmt: skip
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--breakdown-edges", type=int, default=20_000,
                        help="the graph the breakdown is counted on (0: no breakdown)")  # fmt: skip
    parser.add_argument("--no-memory", action="store_true", help="operations only")
    parser.add_argument("--fused", choices=ON_OFF_CHOICES, default="both",
                        help="partgnn with model.fused (the compiled GPU kernels)")  # fmt: skip
    parser.add_argument(
        "--no-reference", action="store_true", help="partgnn alone (no peer source needed)"
    )
    parser.tiny(edges=[], hidden=[8], tiny_edges=500, repeats=1, rounds=1, breakdown_edges=600)
    args = parser.parse_args()
    if args.record is not None and args.no_reference:
        parser.error("--record needs the reference (its figures are ratios to it)")
    if args.record is not None and not args.edges:
        parser.error("--record needs a counted graph (--edges)")
    if not args.no_reference:
        load_peer(args.acorn_src, args.peer_dir)
    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with gpu_kernel_paths():
        for edges in [*args.edges, args.tiny_edges]:
            tiny = edges == args.tiny_edges
            graph = random_graph(max(edges // 10, 2), edges, device)
            for hidden in args.hidden:
                for precision in args.precisions:
                    rows += _setting(graph, edges, hidden, precision, tiny, args)
        breakdown = None
        if args.breakdown_edges:
            breakdown = _breakdown(args.breakdown_edges, args.hidden[0], args.precisions[0])
    result = {"command": " ".join(["bench_launch_budget.py", *sys.argv[1:]]),
              "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__,
              "threads": args.threads, "chunks": _chunk_words(args), "rows": rows,
              "breakdown": breakdown}  # fmt: skip
    (args.out / "launch_budget.json").write_text(json.dumps(result, indent=1))
    (args.out / "launch_budget.md").write_text(markdown(result))
    print(markdown(result))
    _record(args.record, result, args)


def _chunk_words(args) -> str:
    if args.chunk_edges:
        return f"chunks of {args.chunk_edges:,} edges"
    return f"the default chunks of a GPU of {args.gpu_memory_gb:g} GB"


def _setting(
    graph: dict, edges: int, hidden: int, precision: str, tiny: bool, args
) -> list[dict]:  # fmt: skip
    """The reference's row and partgnn's (recomputation on and off) at one setting."""
    settings = {"edges": edges, "hidden": hidden, "precision": precision}
    models = {}
    if not args.no_reference:
        models[REFERENCE] = peer_model(graph, hidden)
    fused_settings = on_off_settings(args.fused)
    for recompute in (True, False):
        for fused in fused_settings:
            name = f"partgnn (recompute {'on' if recompute else 'off'}{', fused' if fused else ''})"
            model = partgnn_model(hidden, recompute, reference=False, fused=fused,
                                  chunk_mb=chunk_mb(args, hidden))  # fmt: skip
            models[name] = partgnn_run(model, graph)
    rows, steps = [], []
    for name, (model, logits) in models.items():
        step = training_step(model, logits, graph["y"], torch.device("cpu"), precision)
        counter = count_step(step)
        row = {**settings, "model": name, "operations": sum(counter.counts.values()),
               "phases": dict(counter.phases), "layer_norm_rows": counter.layer_norm_rows,
               "top": counter.counts.most_common(TOP_OPERATIONS)}  # fmt: skip
        if not args.no_memory:
            row["peak_mb"] = (peak_bytes(step) or 0) / 1e6
        rows.append(row)
        steps.append(step)
    if tiny:
        # Rounds of every model in turn: this machine's speed drifts between minutes.
        times: list[list[float]] = [[] for _ in steps]
        for _ in range(args.rounds):
            for step, measured in zip(steps, times, strict=True):
                measured.append(step_seconds(step, args.repeats))
        for row, measured in zip(rows, times, strict=True):
            row["step_s"] = statistics.median(measured)
    first = rows[0] if not args.no_reference else None
    for row in rows:
        if first is not None and row is not first:
            for key in ("operations", "layer_norm_rows", "peak_mb", "step_s"):
                if row.get(key) is not None and first.get(key):
                    row[f"x_reference_{key}"] = row[key] / first[key]
        print(json.dumps({k: v for k, v in row.items() if k != "top"}), flush=True)
    return rows


def _breakdown(edges: int, hidden: int, precision: str) -> dict:
    """Where partgnn's operations (recomputation on) come from, by difference of counts: per
    message-passing step (8 steps against 4), per layer of every MLP (3 against 2), per chunk
    of edges of every recomputed edge MLP (2 chunks against 1)."""
    graph = random_graph(max(edges // 10, 2), edges, torch.device("cpu"))
    one_chunk = 1e3  # MB: the whole graph in one chunk
    two_chunks = (-(-edges // 2) * CHUNK_VALUES_PER_EDGE * hidden * 4 + 0.5) / 1e6

    def count(**settings) -> int:
        model = partgnn_model(hidden, True, reference=False, **settings)
        step = training_step(*partgnn_run(model, graph), graph["y"], torch.device("cpu"),
                             precision)  # fmt: skip
        return sum(count_step(step).counts.values())

    base = count(chunk_mb=one_chunk)
    per_step = (base - count(chunk_mb=one_chunk, steps=4)) / 4
    return {
        "edges": edges, "hidden": hidden, "precision": precision, "operations": base,
        "per_step": per_step, "outside_steps": base - 8 * per_step,
        "per_mlp_layer": count(chunk_mb=one_chunk, mlp_layers=3) - base,
        "per_chunk": count(chunk_mb=two_chunks) - base,
    }  # fmt: skip


def markdown(result: dict) -> str:
    """The table of a result: operations per step, LayerNorm rows, memory, tiny step times."""
    lines = [
        f"Command: `{result['command']}`; torch {result['torch']}, {result['threads']} threads, "
        f"{result['date']}. Operations: aten operations dispatched by one training step "
        f"(forward, backward, AdamW) that are not views, {result['chunks']}, AdamW multi-tensor, "
        "no C++ CPU kernels (fused: LayerNorm + activation compiled as on a GPU). Peak: most "
        "live tensor bytes during the step (C heap).",
        "",
        "| edges | hidden | precision | model | operations (fwd / bwd / opt) | x ref "
        "| LayerNorm rows x ref | peak MB | x ref | step s (tiny) | x ref |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def ratio(row: dict, key: str) -> str:
        value = row.get(f"x_reference_{key}")
        return "-" if value is None else f"{value:.2f}"

    for row in result["rows"]:
        phases = row["phases"]
        split = " / ".join(f"{phases.get(p, 0):,}" for p in ("forward", "backward", "optimizer"))
        peak = row.get("peak_mb")
        step = row.get("step_s")
        lines.append(
            f"| {row['edges']:,} | {row['hidden']} | {row['precision']} | {row['model']} "
            f"| {row['operations']:,} ({split}) | {ratio(row, 'operations')} "
            f"| {ratio(row, 'layer_norm_rows')} "
            f"| {'-' if peak is None else f'{peak:,.0f}'} | {ratio(row, 'peak_mb')} "
            f"| {'-' if step is None else f'{step:.4f}'} | {ratio(row, 'step_s')} |"
        )
    lines += ["", "Most dispatched operations of partgnn (recompute on), first setting:", ""]
    first = next(r for r in result["rows"] if r["model"].startswith("partgnn (recompute on"))
    lines += [f"- {name}: {count:,}" for name, count in first["top"]]
    breakdown = result.get("breakdown")
    if breakdown:
        lines += [
            "",
            f"Where partgnn's operations come from (recompute on, {breakdown['edges']:,} edges, "
            f"hidden {breakdown['hidden']}, {breakdown['precision']}, one chunk: "
            f"{breakdown['operations']:,}): {breakdown['per_step']:,.1f} per message-passing "
            f"step (8 steps), {breakdown['outside_steps']:,.0f} outside the steps (encoders, "
            f"head, loss, AdamW); one more layer in every MLP adds "
            f"{breakdown['per_mlp_layer']:,}; a second chunk of edges in every recomputed edge "
            f"MLP adds {breakdown['per_chunk']:,}.",
        ]
    return "\n".join(lines) + "\n"


def _record(path: Path | None, result: dict, args) -> None:
    """Two tables of the page: every model's operations and peak against the reference's on
    the largest graph (first hidden width), and its step time on the tiny graph."""
    if path is None:
        return
    hidden = args.hidden[0]
    rows = [
        {**row, **({f"x_reference_{key}": 1.0 for key in ("operations", "layer_norm_rows",
                                                           "peak_mb", "step_s")}
                   if row["model"] == REFERENCE else {})}
        for row in result["rows"]
        if row["hidden"] == hidden
    ]  # fmt: skip
    largest = max(args.edges)
    counts = {(row["model"], row["precision"]): row["operations"] for row in rows
              if row["edges"] == largest}  # fmt: skip
    same = all(
        counts.get((row["model"], row["precision"])) == row["operations"]
        for row in result["rows"]
        if row["edges"] != args.tiny_edges
    )
    sizes = sorted({row["edges"] for row in result["rows"]} - {args.tiny_edges})
    record_table(
        path, "operations",
        f"Operations of one training step (not views: about one GPU kernel launch each), and "
        f"the peak of live tensor bytes, against acorn's InteractionGNN (the reference, 1.00x) "
        f"on a random graph of {largest:,} edges, hidden {hidden}, {result['chunks']}"
        + (f"; the same counts at {' and '.join(f'{e:,}' for e in sizes)} edges and hidden "
           f"{' and '.join(map(str, args.hidden))}" if same and len(sizes) * len(args.hidden) > 1
           else ""),
        [row for row in rows if row["edges"] == largest],
        row_label="{model}", column_label="{precision}",
        cell="{operations:,} ({x_reference_operations:.2f}x; peak {x_reference_peak_mb:.2f}x)",
    )  # fmt: skip
    record_table(
        path, "tiny_step_time",
        f"Step time against the reference's on a tiny graph ({args.tiny_edges:,} edges, hidden "
        f"{hidden}), where a step is its per-operation overhead (median of {args.rounds} rounds "
        f"of {args.repeats} steps)",
        [row for row in rows if row["edges"] == args.tiny_edges],
        row_label="{model}", column_label="{precision}", cell="{x_reference_step_s:.2f}x",
    )  # fmt: skip


if __name__ == "__main__":
    main()
