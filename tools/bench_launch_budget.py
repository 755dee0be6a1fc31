"""The launch budget of one training step, counted on the CPU (issue 49).

A GPU step whose kernels are small is bound by the host issuing them, one launch per operation:
it does not get faster when a graph is split over GPUs. This tool counts the aten operations one
training step dispatches below autograd, views left out (forward, backward with its
recomputation, the AdamW step; each is about one kernel launch on a GPU), for partgnn's
Interaction Network and the peer's model (acorn's InteractionGNN through ../shared/peer: the
reference) on the same random graph, taking the code paths a GPU takes: chunks of edges of the
GPU's size (``MIN_CHUNK_EDGES_CUDA``), no CPU-only fused kernels. It also times a step on a
tiny graph (``--tiny-edges``), where the time is the per-operation overhead, and lists the
operations partgnn dispatches most. Writes ``OUT/launch_budget.json`` and ``.md``::

    OMP_NUM_THREADS=2 .venv/bin/python tools/bench_launch_budget.py --out budget \\
        --acorn-src /tmp/acorn-src
    .venv/bin/python tools/bench_launch_budget.py --out /tmp/b --tiny --acorn-src /tmp/acorn-src
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from _common import ToolParser
from _step_models import partgnn_model, partgnn_run, peer_model, random_graph, training_step
from torch.utils._python_dispatch import TorchDispatchMode

PEER_DIR = Path(__file__).resolve().parents[2] / "shared" / "peer"
#: Operations listed per setting: those partgnn dispatches most.
TOP_OPERATIONS = 8


class OperationCounter(TorchDispatchMode):
    """Counts the aten operations dispatched inside it that are not views, by name
    (``aten.mm``...): each launches a kernel on a GPU (an allocation without a fill, such as
    ``aten.empty``, is counted too)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view:  # a view (t, slice, detach...) launches no kernel
            self.counts[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


@contextmanager
def gpu_chunking() -> Iterator[None]:
    """Chunked edge MLPs split edges as on a GPU (chunks of ``MIN_CHUNK_EDGES_CUDA``)."""
    from partgnn.models import chunked_edge_mlp

    original = chunked_edge_mlp.min_chunk_edges
    chunked_edge_mlp.min_chunk_edges = lambda device: chunked_edge_mlp.MIN_CHUNK_EDGES_CUDA
    try:
        yield
    finally:
        chunked_edge_mlp.min_chunk_edges = original


def count_step(step: Callable[[], None]) -> Counter[str]:
    """The operations of one call of ``step`` (after a warm-up call, which builds AdamW's
    state)."""
    step()
    with OperationCounter() as counter:
        step()
    return counter.counts


def step_seconds(step: Callable[[], None], repeats: int) -> float:
    """Median seconds of ``repeats`` calls of ``step`` after one warm-up call."""
    step()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = ToolParser(__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--acorn-src", type=Path, default=Path("/tmp/acorn-src"))
    parser.add_argument("--peer-dir", type=Path, default=PEER_DIR)
    parser.add_argument("--edges", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--hidden", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--tiny-edges", type=int, default=2000, help="the per-operation graph")
    parser.add_argument("--repeats", type=int, default=5, help="timed tiny-graph steps")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--no-reference", action="store_true", help="partgnn alone (no peer source needed)"
    )
    parser.tiny(edges=[3000], hidden=[8], tiny_edges=500, repeats=1)
    args = parser.parse_args()
    if not args.no_reference:
        if not (args.acorn_src / "acorn").is_dir():
            sys.exit(f"{args.acorn_src}: no acorn source (see {args.peer_dir / 'README.md'})")
        sys.path.insert(0, str(args.peer_dir))
        import peer_acorn

        peer_acorn.install_stubs(str(args.acorn_src))
    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with gpu_chunking():
        for edges in [*args.edges, args.tiny_edges]:
            tiny = edges == args.tiny_edges
            graph = random_graph(max(edges // 10, 2), edges, device)
            for hidden in args.hidden:
                for precision in ("float32", "bf16"):
                    rows += _setting(graph, edges, hidden, precision, tiny, args.repeats,
                                     reference=not args.no_reference)  # fmt: skip
    result = {"command": " ".join(["bench_launch_budget.py", *sys.argv[1:]]),
              "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__,
              "threads": args.threads, "rows": rows}  # fmt: skip
    (args.out / "launch_budget.json").write_text(json.dumps(result, indent=1))
    (args.out / "launch_budget.md").write_text(markdown(result))
    print(markdown(result))


def _setting(
    graph: dict, edges: int, hidden: int, precision: str, tiny: bool, repeats: int, *,
    reference: bool,
) -> list[dict]:  # fmt: skip
    """The reference's row and partgnn's (recomputation on and off) at one setting."""
    settings = {"edges": edges, "hidden": hidden, "precision": precision}
    models = {}
    if reference:
        models["reference (acorn InteractionGNN, ckpt)"] = peer_model(graph, hidden)
    for recompute in (True, False):
        name = f"partgnn (recompute {'on' if recompute else 'off'})"
        models[name] = partgnn_run(partgnn_model(hidden, recompute, reference=False), graph)
    rows, first = [], None
    for name, (model, logits) in models.items():
        step = training_step(model, logits, graph["y"], torch.device("cpu"), precision)
        counts = count_step(step)
        row = {**settings, "model": name, "operations": sum(counts.values()),
               "top": counts.most_common(TOP_OPERATIONS)}  # fmt: skip
        if tiny:
            row["step_s"] = step_seconds(step, repeats)
        if first is None and reference:
            first = row
        elif first is not None:
            row["x_reference_operations"] = row["operations"] / first["operations"]
            if tiny:
                row["x_reference_step"] = row["step_s"] / first["step_s"]
        print(json.dumps({k: v for k, v in row.items() if k != "top"}), flush=True)
        rows.append(row)
    return rows


def markdown(result: dict) -> str:
    """The table of a result: operations per step, and tiny-graph step times."""
    lines = [
        f"Command: `{result['command']}`; torch {result['torch']}, {result['threads']} threads, "
        f"{result['date']}. Operations: aten operations dispatched by one training step "
        "(forward, backward, AdamW) that are not views, GPU chunk sizes, no fused CPU kernels.",
        "",
        "| edges | hidden | precision | model | operations | x reference | step s (tiny) "
        "| x reference |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        ratio = row.get("x_reference_operations")
        step = row.get("step_s")
        step_ratio = row.get("x_reference_step")
        lines.append(
            f"| {row['edges']:,} | {row['hidden']} | {row['precision']} | {row['model']} "
            f"| {row['operations']:,} | {'-' if ratio is None else f'{ratio:.1f}'} "
            f"| {'-' if step is None else f'{step:.4f}'} "
            f"| {'-' if step_ratio is None else f'{step_ratio:.1f}'} |"
        )
    lines += ["", "Most dispatched operations of partgnn (recompute on), first setting:", ""]
    first = next(r for r in result["rows"] if r["model"].startswith("partgnn (recompute on"))
    lines += [f"- {name}: {count:,}" for name, count in first["top"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
