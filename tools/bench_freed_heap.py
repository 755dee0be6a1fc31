"""What ``run.keep_freed_heap`` buys: one training step with and without it, each in a process of
its own (the setting is process-wide).

The step is one rank's share of a full event graph (the first half of the edges of event 0 of
``--graphs``): forward under bf16 autocast and backward, with recomputation and the fused kernels
as the full-graph recipe trains, for the default model and the reference-style one
(``model.batch_norm`` and ``model.concat_initial``, unchunked; ``--models`` picks). Each
process runs a warm-up step, then the measured one: wall, user and system CPU time, minor page
faults, peak RSS (``--record`` writes the step times to the current-figures page's step-time file)::

    OMP_NUM_THREADS=1 .venv/bin/python tools/bench_freed_heap.py --graphs GRAPHS.h5
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from _common import ToolParser, markdown_table, partgnn, record_table

#: The models measured: name -> InteractionNetwork settings.
MODELS = {
    "default (hidden 64, 2-layer MLPs, LayerNorm)": {
        "hidden": 64, "steps": 8, "mlp_layers": 2, "activation": "silu",
    },
    "reference-style (hidden 64, 3-layer MLPs, BatchNorm, concat)": {
        "hidden": 64, "steps": 8, "mlp_layers": 3, "activation": "relu", "residual": False,
        "layer_norm": False, "batch_norm": True, "concat_initial": True,
    },
}  # fmt: skip

STEP = """
import json, resource, sys, time, torch
from partgnn.data.files.storage import GraphFile
from partgnn.memory.heap_retention import keep_freed_heap
from partgnn.models.compute_policy import ComputePolicy
from partgnn.models.interaction_network import InteractionNetwork

graphs, settings, keep = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3] == "keep"
torch.set_num_threads(1)
if keep:
    keep_freed_heap()
with GraphFile(graphs) as graph_file:
    graph = graph_file[0]
n_edges = graph.edge_index.shape[1] // 2
edge_index, edge_attr = graph.edge_index[:, :n_edges], graph.edge_attr[:n_edges]
torch.manual_seed(0)
model = InteractionNetwork(
    node_features=graph.x.shape[1], edge_features=graph.edge_attr.shape[1],
    compute=ComputePolicy(recompute=True, fused=True), **settings,
)

def step():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(graph.x, edge_index, edge_attr)
    logits.float().sum().backward()

step()
before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
step()
wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({
    "edges": n_edges, "wall_s": wall, "user_s": after.ru_utime - before.ru_utime,
    "sys_s": after.ru_stime - before.ru_stime, "faults": after.ru_minflt - before.ru_minflt,
    "peak_rss_gb": after.ru_maxrss / 2**20,
}))
"""


def main() -> None:
    parser = ToolParser(__doc__, figures="step_time")
    parser.add_argument("--graphs", type=Path, help="graphs file (default: --tiny makes one)")
    parser.add_argument("--out", type=Path, default=Path("bench-freed-heap"))
    names = [_short(name) for name in MODELS]
    parser.add_argument("--models", nargs="+", choices=names, default=names, help="models measured")
    parser.tiny(out=Path("bench-freed-heap-tiny"), models=["default"])
    args = parser.parse_args()
    graphs = args.graphs
    if graphs is None:
        if not args.tiny:
            parser.error("give --graphs (full event graphs, e.g. build-graphs on pile-up 200)")
        graphs = _tiny_graphs(args.out)
    rows, measurements = [], []
    for name, settings in MODELS.items():
        if _short(name) not in args.models:
            continue
        results = {mode: _step(graphs, settings, mode) for mode in ("return", "keep")}
        for mode, result in results.items():
            rows.append((
                name, "kept" if mode == "keep" else "returned (glibc default)",
                f"{result['edges']:,}", f"{result['wall_s']:.1f}", f"{result['user_s']:.1f}",
                f"{result['sys_s']:.1f}", f"{result['faults']:,}", f"{result['peak_rss_gb']:.2f}",
            ))  # fmt: skip
            measurements.append({
                "model": name, "freed": "kept" if mode == "keep" else "returned (glibc's default)",
                **result,
            })  # fmt: skip
    print(markdown_table(
        ("model", "freed memory", "edges", "step [s]", "user [s]", "system [s]", "page faults",
         "peak RSS [GB]"), rows,
    ))  # fmt: skip
    edges = measurements[0]["edges"]
    record_table(
        args.record, "freed_heap",
        f"One rank's training step on half a full event graph ({edges:,} edges; bf16, "
        "recomputation, fused kernels, one thread) with the memory it frees kept by the process "
        "(run.keep_freed_heap) or returned to the system: seconds, minor page faults, peak RSS",
        measurements,
        row_label="{model}", column_label="freed memory {freed}",
        cell="{wall_s:.1f} s, {faults:,} faults, peak {peak_rss_gb:.2f} GB",
    )  # fmt: skip


def _short(name: str) -> str:
    """A model's name on the command line: its name's first word (``default``...)."""
    return name.split(" ")[0]


def _step(graphs: Path, settings: dict, mode: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", STEP, str(graphs), json.dumps(settings), mode],
        capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode:
        sys.exit(f"the step failed ({mode}):\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _tiny_graphs(out: Path) -> Path:
    graphs = out / "graphs.h5"
    if not graphs.exists():
        partgnn("simulate", "--events", 1, "--pileup", 2, "--out", out / "events.h5")
        partgnn("build-graphs", out / "events.h5", "--out", graphs)
    return graphs


if __name__ == "__main__":
    main()
