"""Scoring one pile-up-200 event graph with each exported format against partgnn's own scoring:
wall time per graph on 1 and 2 threads, and how far each file's scores are from ``partgnn
infer``'s (issue 51).

Simulates one event (the realistic simulation, seed 13, event 2000: a held-out event of the
shipped full-graph model's card), builds its graph with the model's module map (``--map
pretrained:MODEL``), scores it with ``partgnn infer``, exports the model in each format
(``partgnn export``) and scores the graph with each file in a process that cannot import
partgnn (``tools/score_exported.py``: TorchScript by ``torch.jit.load``, AOTInductor by
``aoti_load_package``, ONNX by onnxruntime with ACTS's settings). partgnn's time is its model's
forward pass on the graph (what ``partgnn infer`` computes per event), in this process. Times
are medians of ``--repeats`` after one warm-up::

    .venv/bin/python tools/bench_export.py --repeats 5 [--record]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from _common import REPOSITORY, ToolParser, machine, markdown_table, partgnn, record_table

from partgnn.data.files.storage import GraphFile, ScoresFile
from partgnn.export.export_model import (
    kept_node_inputs,
    recorded_input_features,
    with_kept_fields,
)
from partgnn.export.formats import FORMATS
from partgnn.train.inference import load_trained_model
from partgnn.train.run_directory.saved_model import SavedModel


def main() -> None:
    parser = ToolParser(__doc__, figures="export")
    parser.add_argument("--model", default="trackml-full", help="a shipped model (pretrained:)")
    parser.add_argument("--pileup", type=float, default=200.0)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.tiny(pileup=3.0, threads=[1], formats=["torchscript", "onnx"], repeats=1)
    args = parser.parse_args()
    model_spec = f"pretrained:{args.model}"
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        events, graphs, scores = work / "events.h5", work / "graphs.h5", work / "scores.h5"
        partgnn("simulate", "--events", "1", "--pileup", f"{args.pileup:g}", "--seed", "13",
                "--first-event-id", "2000", "--out", events)  # fmt: skip
        partgnn("build-graphs", events, "--method", "module-map", "--map", model_spec,
                "--out", graphs)  # fmt: skip
        partgnn("infer", "--checkpoint", model_spec, "--graphs", graphs, "--out", scores,
                "--device", "cpu")  # fmt: skip
        with GraphFile(graphs) as graph_file, ScoresFile(scores) as scores_file:
            graph, extra, infer_scores = graph_file[0], graph_file.extra(0), scores_file[0]
        saved = SavedModel.read(model_spec)
        cut = saved.score_cut
        # what the model reads (its config's columns), and what its exported file is given:
        # partgnn's four node columns, then the model's kept fields at its scales
        x, edge_attr = recorded_input_features(saved).select(graph, extra, where=str(graphs))
        given = with_kept_fields(graph.x, extra, kept_node_inputs(saved))
        npz = work / "graph.npz"
        np.savez(npz, node_features=given, edge_index=graph.edge_index.numpy())
        size = f"{graph.num_nodes:,} nodes, {graph.edge_index.shape[1]:,} edges"
        rows, timings, agreements = [], [], []
        edges = graph.edge_index.shape[1]
        own = _partgnn_times(model_spec, x, graph.edge_index, edge_attr, args.threads,
                             args.repeats)  # fmt: skip
        rows.append(("partgnn (model forward, as infer)", *(f"{t:.3f}" for t in own), "-", "-"))
        timings += [
            {
                "scoring": "partgnn (its model's forward pass, as infer)",
                "threads": n,
                "seconds": t,
                "ratio": 1.0,
            }
            for t, n in zip(own, args.threads, strict=True)
        ]
        for fmt in args.formats:
            exported = work / f"model.{'pt2' if fmt == 'aoti' else fmt}"
            partgnn("export", model_spec, "--format", fmt, "--out", exported, in_process=True)
            times = []
            for threads in args.threads:
                seconds, logits = _file_time(exported, fmt, npz, work, threads, args.repeats)
                times.append(seconds)
            got = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
            largest = float(np.abs(got - infer_scores).max())
            flipped = int(((got > cut) != (infer_scores > cut)).sum())
            rows.append((fmt, *(f"{t:.3f}" for t in times), f"{largest:.1e}", str(flipped)))
            timings += [{"scoring": f"the {fmt} file", "threads": n, "seconds": t, "ratio": t / o}
                        for t, o, n in zip(times, own, args.threads, strict=True)]  # fmt: skip
            agreements.append({"scoring": f"the {fmt} file", "largest": largest,
                               "flipped": flipped, "edges": edges})  # fmt: skip
    print(f"{machine()}; {size}; medians of {args.repeats}\n")
    header = ["scoring", *(f"s per graph, {n} thread(s)" for n in args.threads),
              "max abs(score - infer's)", f"edges across the cut ({cut:.4g})"]  # fmt: skip
    print(markdown_table(header, rows))
    graph_named = f"one pile-up-{args.pileup:g} event graph ({size}; its module map's construction)"
    record_table(
        args.record, "export_time",
        f"pretrained:{args.model} exported and scored without partgnn "
        f"(tools/score_exported.py), against partgnn's own scoring: seconds per graph on "
        f"{graph_named}, median of {args.repeats}",
        timings,
        row_label="{scoring}", column_label="{threads} thread(s)",
        cell="{seconds:.3f} s ({ratio:.2f}x)",
    )  # fmt: skip
    record_table(
        args.record, "export_scores",
        "The exported files' scores against partgnn infer's on the same graph: the largest "
        f"difference, and the edges on the other side of the card's cut ({cut:.4g})",
        agreements,
        row_label="{scoring}", column_label="max |score - infer's|, edges across the cut",
        cell="{largest:.1e}, {flipped} of {edges:,}",
    )  # fmt: skip


def _partgnn_times(
    spec: str,
    x: torch.Tensor,
    edge_index: torch.Tensor,
    edge_attr: torch.Tensor,
    thread_counts: list[int],
    repeats: int,
) -> list[float]:
    """Median seconds of the model's forward pass on ``x`` (N, F_node), ``edge_index`` (2, E)
    and ``edge_attr`` (E, F_edge), per thread count."""
    model, _ = load_trained_model(spec, x.shape[1], edge_attr.shape[1], torch.device("cpu"))
    times = []
    for threads in thread_counts:
        torch.set_num_threads(threads)
        with torch.no_grad():
            model(x, edge_index, edge_attr)  # warm-up
            runs = []
            for _ in range(repeats):
                start = time.perf_counter()
                model(x, edge_index, edge_attr)
                runs.append(time.perf_counter() - start)
        times.append(statistics.median(runs))
    return times


def _file_time(
    path: Path, fmt: str, npz: Path, work: Path, threads: int, repeats: int
) -> tuple[float, np.ndarray]:
    out = work / f"logits-{fmt}-{threads}.npz"
    done = subprocess.run(
        [sys.executable, str(REPOSITORY / "tools" / "score_exported.py"), str(path), "--format",
         fmt, "--graph", str(npz), "--out", str(out), "--threads", str(threads), "--repeat",
         str(repeats)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode:
        sys.exit(f"score_exported.py {fmt} failed:\n{done.stderr[-2000:]}")
    line = next(x for x in done.stdout.splitlines() if x.startswith("median wall time"))
    return float(line.split(":")[1].split()[0]), np.load(out)["logits"]


if __name__ == "__main__":
    main()
