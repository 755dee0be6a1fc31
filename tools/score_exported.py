"""Scores a graph with a file ``partgnn export`` wrote, as ACTS's GNN plugin would: without
partgnn (this script imports torch, numpy and, for ONNX, onnxruntime only, and refuses to run
where ``import partgnn`` would be needed: the check that the file stands alone).

The graph comes as an ``.npz`` with ``node_features (N, F) float32`` and ``edge_index (2, E)
int64``; the logits go to ``--out`` (``.npz``, ``logits (E,) float32``), and the file's calling
convention (``partgnn.json``) is printed::

    .venv/bin/python tools/score_exported.py MODEL.onnx --format onnx --graph graph.npz \\
        --out logits.npz [--threads 1] [--repeat 5]

``--repeat N`` scores the graph N more times after the first and prints the median wall time
(the timing ``tools/bench_export.py`` reads). TorchScript is loaded with ``torch.jit.load``
(ACTS: ``torch::jit::load``), an AOTInductor package with
``torch._inductor.aoti_load_package``, ONNX with an onnxruntime session of one intra-op thread
per ``--threads`` and extended graph optimisations (ACTS's ``OnnxEdgeClassifier`` settings).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import zipfile
from pathlib import Path

sys.modules["partgnn"] = None  # type: ignore[assignment]  # import partgnn fails from here on

import numpy as np  # noqa: E402
import torch  # noqa: E402

#: Each format's name in a sentence.
FORMAT_NAMES = {"torchscript": "a TorchScript", "aoti": "an AOTInductor", "onnx": "an ONNX"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--format", required=True, choices=("torchscript", "aoti", "onnx"))
    parser.add_argument("--graph", required=True, help=".npz with node_features and edge_index")
    parser.add_argument("--out", required=True, help=".npz for the logits")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=0)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = parser.parse_args()
    for path in (args.model, args.graph):
        if not Path(path).is_file():
            sys.exit(f"score_exported.py: {path}: no such file")
    if not Path(args.out).resolve().parent.is_dir():
        sys.exit(f"score_exported.py: {args.out}: its folder does not exist")
    torch.set_num_threads(args.threads)
    try:
        with np.load(args.graph) as graph:
            node_features = np.ascontiguousarray(graph["node_features"], dtype=np.float32)
            edge_index = np.ascontiguousarray(graph["edge_index"], dtype=np.int64)
    except Exception as err:  # not an .npz, or a key missing: one line
        sys.exit(f"score_exported.py: {args.graph}: not a graph .npz with node_features and "
                 f"edge_index ({_last_line(err)})")  # fmt: skip
    try:
        score, convention = _scorer(args.model, args.format, args.threads, args.device)
    except Exception as err:  # another format, or not an export of partgnn's
        sys.exit(f"score_exported.py: {args.model}: not {FORMAT_NAMES[args.format]} file "
                 f"partgnn exported ({_last_line(err)})")  # fmt: skip
    print(json.dumps(convention, indent=1, sort_keys=True))
    try:
        logits = score(node_features, edge_index)
    except Exception as err:  # the file's own refusal of the inputs, its last line
        sys.exit(f"score_exported.py: {args.model}: {_last_line(err)}")
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        score(node_features, edge_index)
        times.append(time.perf_counter() - start)
    np.savez(args.out, logits=logits.astype(np.float32))
    if times:
        print(f"median wall time per graph: {statistics.median(times):.4f} s ({args.repeat} runs)")


def _last_line(err: BaseException) -> str:
    """The last line of an error (a TorchScript traceback ends with the model's own line)."""
    lines = str(err).strip().splitlines()
    return lines[-1].strip() if lines else type(err).__name__


def _scorer(path: str, fmt: str, threads: int, device: str):
    """``(score(node_features, edge_index) -> logits (E,), calling convention)``."""
    if fmt == "onnx":
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        providers = ["CUDAExecutionProvider"] if device == "cuda" else ["CPUExecutionProvider"]
        session = onnxruntime.InferenceSession(path, options, providers=providers)
        metadata = session.get_modelmeta().custom_metadata_map

        def score(nodes, edges):
            output = session.run(None, {"node_features": nodes, "edge_index": edges})[0]
            return output.reshape(-1)

        return score, json.loads(metadata["partgnn"])
    if fmt == "torchscript":
        extra = {"partgnn.json": ""}
        module = torch.jit.load(path, map_location=device, _extra_files=extra)
        module.eval()
        convention = json.loads(extra["partgnn.json"])
    else:
        from torch._inductor import aoti_load_package

        module = aoti_load_package(path)
        with zipfile.ZipFile(path) as archive:
            name = next(n for n in archive.namelist() if n.endswith("/extra/partgnn.json"))
            convention = json.loads(archive.read(name))

    def score(nodes, edges):
        with torch.inference_mode():
            output = module(torch.from_numpy(nodes).to(device), torch.from_numpy(edges).to(device))
            if device == "cuda":
                torch.cuda.synchronize()
            return output.to(torch.float32).reshape(-1).cpu().numpy()

    return score, convention


if __name__ == "__main__":
    main()
