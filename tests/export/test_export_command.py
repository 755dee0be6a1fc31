"""``partgnn export`` on the shipped full-graph model, checked as ACTS would use the file: a
fresh process that cannot import partgnn (tools/score_exported.py) loads it and scores the real
TrackML sample event's graph (built by the model's module map)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from partgnn.cli.main import main
from partgnn.data.storage import GraphFile, ScoresFile
from partgnn.export.edge_classifier import ExportedEdgeClassifier
from partgnn.export.node_inputs import NodeInputs
from partgnn.train.inference import load_trained_model
from tests.distributed.launch import REPOSITORY
from tests.subprocesses import run_command

MODEL = "pretrained:trackml-full"
#: A file against the module it was written from, in score. TorchScript runs torch's kernels
#: (and so does the C++ program); inductor's fused ones and onnxruntime's (its LayerNorm, its
#: Gemm) sum in other orders: 1.1-1.3e-5 for ONNX on this graph. Inductor generates its kernels
#: for the CPU it compiles on: below 1e-5 on one with AVX-512, 1.01e-5 on one with AVX2 only
#: (AMD EPYC, family 25, 2026-12-02).
FILE_TOLERANCE = 1e-5
FORMAT_TOLERANCE = {"torchscript": FILE_TOLERANCE, "aoti": 3e-5, "onnx": 3e-5}
#: Against ``partgnn infer``'s scores: the node features come as float32 (as ACTS gives them),
#: and the edge features computed from them differ from the graph file's (made from float64
#: positions) in the last bits of dphi and the phi slope: 2.9e-4 at most on this graph.
INFER_TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def sample(sample_dir: Path, tmp_path_factory) -> dict:
    """The real sample event's graph built as the model's card says, its scores by ``partgnn
    infer``, the graph as ACTS would give it (``graph.npz``) and the model's card cut."""
    work = tmp_path_factory.mktemp("export")
    events, graphs, scores = work / "events.h5", work / "graphs.h5", work / "scores.h5"
    assert main(["import-trackml", str(sample_dir), "--out", str(events)]) == 0
    assert main(["build-graphs", str(events), "--method", "module-map", "--map", MODEL,
                 "--out", str(graphs)]) == 0  # fmt: skip
    assert main(["infer", "--checkpoint", MODEL, "--graphs", str(graphs), "--out", str(scores),
                 "--device", "cpu"]) == 0  # fmt: skip
    with GraphFile(graphs) as graph_file, ScoresFile(scores) as scores_file:
        graph, infer_scores = graph_file[0], scores_file[0]
    np.savez(work / "graph.npz", node_features=graph.x.numpy(), edge_index=graph.edge_index.numpy())
    np.savez(work / "graph-xyz.npz", node_features=graph.pos.numpy(),
             edge_index=graph.edge_index.numpy())  # fmt: skip
    model, _ = load_trained_model(MODEL, 4, 7, torch.device("cpu"))
    module = ExportedEdgeClassifier(model, NodeInputs())
    with torch.no_grad():
        module_logits = module(graph.x, graph.edge_index)
        module.sums_by_prefix = True  # as the ONNX file sums
        prefix_logits = module(graph.x, graph.edge_index)
    cut = float(torch.load(REPOSITORY / "partgnn/pretrained/trackml-full.pt",
                           weights_only=True)["score_cut"])  # fmt: skip
    return {"work": work, "infer": infer_scores, "module": torch.sigmoid(module_logits).numpy(),
            "module-onnx": torch.sigmoid(prefix_logits).numpy(), "cut": cut}  # fmt: skip


def _scored_without_partgnn(
    model: Path, fmt: str, graph: Path, out: Path
) -> tuple[np.ndarray, dict]:
    tool = REPOSITORY / "tools" / "score_exported.py"
    command = [sys.executable, str(tool), str(model), "--format", fmt, "--graph", str(graph)]
    result = run_command([*command, "--out", str(out)])
    assert result.returncode == 0, result.stderr[-2000:]
    convention = json.loads(result.stdout[: result.stdout.rindex("}") + 1])
    logits = np.load(out)["logits"].astype(np.float64)
    return 1.0 / (1.0 + np.exp(-logits)), convention


@pytest.mark.parametrize(
    "fmt", ["torchscript", "onnx", pytest.param("aoti", marks=pytest.mark.slow)]
)
def test_an_exported_model_scores_as_partgnn_does_without_partgnn(sample: dict, capsys, fmt):
    work = sample["work"]
    exported = work / f"model.{fmt}"
    assert main(["export", MODEL, "--format", fmt, "--out", str(exported)]) == 0
    printed = capsys.readouterr().out
    assert f"trackml-full -> {exported} ({fmt}" in printed
    assert "r / 1000, phi / 3.14159, z / 1000, eta" in printed
    scores, convention = _scored_without_partgnn(exported, fmt, work / "graph.npz",
                                                 work / f"logits-{fmt}.npz")  # fmt: skip
    assert convention["model"] == "trackml-full" and convention["score_cut"] == sample["cut"]
    assert convention["node_feature_columns"] == ["r", "phi", "z", "eta"]
    written_from = sample["module-onnx" if fmt == "onnx" else "module"]
    assert np.abs(scores - written_from).max() < FORMAT_TOLERANCE[fmt]
    assert np.abs(scores - sample["infer"]).max() < INFER_TOLERANCE
    cut = sample["cut"]
    assert ((scores > cut) == (sample["infer"] > cut)).all()  # the same edges above the cut


def test_given_x_y_z_the_features_are_the_graph_files_own(sample: dict, tmp_path: Path):
    """ACTS's ``nodeFeatures = [X, Y, Z]`` (scales 1): the file computes r and phi from the
    hits' float32 positions as partgnn's graphs are made, so its scores are ``partgnn infer``'s
    within the network's rounding (no float32 phi first)."""
    exported = tmp_path / "model.torchscript"
    assert main(["export", MODEL, "--format", "torchscript", "--out", str(exported),
                 "--node-features", "x,y,z", "--feature-scales", "1,1,1"]) == 0  # fmt: skip
    scores, convention = _scored_without_partgnn(
        exported, "torchscript", sample["work"] / "graph-xyz.npz", tmp_path / "logits.npz"
    )
    assert convention["node_feature_columns"] == ["x", "y", "z"]
    assert np.abs(scores - sample["infer"]).max() < FILE_TOLERANCE
    code = main(["export", MODEL, "--format", "onnx", "--out", str(tmp_path / "m.onnx"),
                 "--node-features", "x,y,z", "--feature-scales", "1,1,1"])  # fmt: skip
    assert code == 2 and not (tmp_path / "m.onnx").exists()


def test_export_refuses_what_it_cannot_write_in_one_line(sample: dict, tmp_path: Path, capsys):
    exported = tmp_path / "model.pt"
    exported.write_text("mine")
    assert main(["export", MODEL, "--format", "torchscript", "--out", str(exported)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("exists; pass --overwrite to replace it") and "\n" not in err
    assert exported.read_text() == "mine"
    code = main(["export", MODEL, "--format", "onnx", "--out", str(tmp_path / "m.onnx"),
                 "--node-features", "r,phi"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and "z missing" in err and "\n" not in err
    assert not (tmp_path / "m.onnx").exists()


def test_a_model_class_of_ones_own_is_refused(tmp_path: Path, capsys):
    state = torch.load(REPOSITORY / "partgnn/pretrained/trackml-pt1.pt", weights_only=True)
    state["config"]["model"]["target"] = "mypackage.models:MyNet"
    checkpoint = tmp_path / "own.pt"
    torch.save(state, checkpoint)
    code = main(["export", str(checkpoint), "--format", "torchscript", "--out",
                 str(tmp_path / "own.torchscript")])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and "model.target mypackage.models:MyNet is a model class of one's own" in err
    assert "\n" not in err and not (tmp_path / "own.torchscript").exists()


def _compiler() -> str | None:
    import shutil

    return shutil.which("g++") or shutil.which("clang++")


@pytest.mark.slow
@pytest.mark.skipif(_compiler() is None, reason="no C++ compiler (g++ or clang++) on this machine")
def test_a_cpp_program_loads_it_as_acts_does(sample: dict, tmp_path: Path):
    """tests/export/acts_like_classifier.cpp, built against the libtorch in the torch wheel,
    calls the TorchScript file as ACTS's TorchEdgeClassifier does."""
    torch_dir = Path(torch.__file__).parent
    program = tmp_path / "acts_like_classifier"
    build = run_command([
        _compiler(), "-std=c++20", "-O1", str(Path(__file__).parent / "acts_like_classifier.cpp"),
        f"-I{torch_dir / 'include'}", f"-I{torch_dir / 'include/torch/csrc/api/include'}",
        f"-L{torch_dir / 'lib'}", "-ltorch", "-ltorch_cpu", "-lc10",
        f"-Wl,-rpath,{torch_dir / 'lib'}",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}", "-o", str(program),
    ])  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    exported = tmp_path / "model.torchscript"
    assert main(["export", MODEL, "--format", "torchscript", "--out", str(exported)]) == 0
    graph = np.load(sample["work"] / "graph.npz")
    nodes, edges = graph["node_features"], graph["edge_index"]
    nodes.astype(np.float32).tofile(tmp_path / "nodes.bin")
    edges.astype(np.int64).tofile(tmp_path / "edges.bin")
    result = run_command([
        str(program), str(exported), str(tmp_path / "nodes.bin"), str(tmp_path / "edges.bin"),
        str(nodes.shape[0]), str(nodes.shape[1]), str(edges.shape[1]), str(tmp_path / "s.bin"),
    ])  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    scores = np.fromfile(tmp_path / "s.bin", dtype=np.float32)
    assert scores.shape == (edges.shape[1],)
    assert np.abs(scores - sample["module"]).max() < FILE_TOLERANCE
    cut = sample["cut"]
    assert ((scores > cut) == (sample["infer"] > cut)).all()
