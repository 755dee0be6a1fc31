"""``partgnn export`` on the shipped full-graph model, checked as ACTS would use the file: a
fresh process that cannot import partgnn (tools/score_exported.py) loads it and scores the real
TrackML sample event's graph (built by the model's module map), given partgnn's own columns and
the fields of the graphs files the model reads (its cluster shape features), as its card says."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from partgnn.cli.main import main
from partgnn.data.files.storage import GraphFile, ScoresFile
from partgnn.export.edge_classifier import ExportedEdgeClassifier
from partgnn.export.export_model import (
    kept_node_inputs,
    recorded_input_features,
    with_kept_fields,
)
from partgnn.export.node_inputs import NodeInputs
from partgnn.train.inference import load_trained_model
from partgnn.train.run_directory.saved_model import SavedModel
from tests.distributed.launch import REPOSITORY
from tests.subprocesses import run_command

MODEL = "pretrained:trackml-full"
SHIPPED = SavedModel.read(MODEL)
#: The model's inputs that are fields of its graphs files, with their scales, and all its
#: columns as an exported file takes them by default.
KEPT: dict[str, float] = kept_node_inputs(SHIPPED)
FEATURES = recorded_input_features(SHIPPED)
INPUTS = NodeInputs.parse(None, None, kept=KEPT)
WIDTH = len(INPUTS.columns)


def _columns(*positions: str) -> str:
    """``--node-features``: the positions given, then the model's kept fields."""
    return ",".join((*positions, *KEPT))


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
        graph, extras, infer_scores = graph_file[0], graph_file.extra(0), scores_file[0]
    given = with_kept_fields(graph.x, extras, KEPT)
    np.savez(work / "graph.npz", node_features=given, edge_index=graph.edge_index.numpy())
    np.savez(work / "graph-xyz.npz", node_features=with_kept_fields(graph.pos, extras, KEPT),
             edge_index=graph.edge_index.numpy())  # fmt: skip
    model, _ = load_trained_model(MODEL, WIDTH, 7, torch.device("cpu"))
    module = ExportedEdgeClassifier(model, INPUTS, FEATURES)
    with torch.no_grad():
        module_logits = module(torch.from_numpy(given), graph.edge_index)
        module.sums_by_prefix = True  # as the ONNX file sums
        prefix_logits = module(torch.from_numpy(given), graph.edge_index)
    cut = SHIPPED.score_cut
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
    exported = work / f"model.{'pt2' if fmt == 'aoti' else fmt}"
    assert main(["export", MODEL, "--format", fmt, "--out", str(exported)]) == 0
    printed = capsys.readouterr().out
    assert f"trackml-full -> {exported} ({fmt}" in printed
    assert INPUTS.describe() in printed and INPUTS.describe().startswith(
        "r / 1000, phi / 3.14159, z / 1000, eta"
    )
    scores, convention = _scored_without_partgnn(exported, fmt, work / "graph.npz",
                                                 work / f"logits-{fmt}.npz")  # fmt: skip
    assert convention["model"] == "trackml-full" and convention["score_cut"] == sample["cut"]
    assert convention["node_feature_columns"] == ["r", "phi", "z", "eta", *KEPT]
    written_from = sample["module-onnx" if fmt == "onnx" else "module"]
    assert np.abs(scores - written_from).max() < FORMAT_TOLERANCE[fmt]
    assert np.abs(scores - sample["infer"]).max() < INFER_TOLERANCE
    cut = sample["cut"]
    assert ((scores > cut) == (sample["infer"] > cut)).all()  # the same edges above the cut
    _refuses_what_it_cannot_score(exported, fmt)


#: Inputs an exported model cannot score, and what its refusal names (issue 67: the AOTI and
#: TorchScript files took float64 features (NaN logits), (N, 3) and 1-D features, (E, 2) and
#: (3, E) edges, int32 edges (an index error in C++ frames)).
BAD_INPUTS = {
    "float64 features": (lambda x, e: (x.double(), e), f"got (10, {WIDTH}) float64"),
    "a column short": (lambda x, e: (x[:, :-1].contiguous(), e), f"got (10, {WIDTH - 1}) float32"),
    "a column more": (
        lambda x, e: (torch.cat([x, x[:, :1]], 1), e),
        f"got (10, {WIDTH + 1}) float32",
    ),
    "1-D features": (lambda x, e: (x[:, 0].contiguous(), e), "got (10,) float32"),
    "(E, 2) edges": (lambda x, e: (x, e.t().contiguous()), "got (3, 2) int64"),
    "(3, E) edges": (lambda x, e: (x, torch.cat([e, e[:1]])), "got (3, 3) int64"),
    "int32 edges": (lambda x, e: (x, e.int()), "got (2, 3) int32"),
}


def _refuses_what_it_cannot_score(exported: Path, fmt: str) -> None:
    """Each of :data:`BAD_INPUTS` is refused by the file itself with one line naming what it
    takes and what came (ONNX: onnxruntime's own words); good inputs of 0, 1 and 10 nodes are
    scored."""
    x, e = torch.rand(10, WIDTH), torch.tensor([[0, 1, 2], [1, 2, 3]])
    if fmt == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(str(exported))

        def run(x, e):
            return session.run(None, {"node_features": x.numpy(), "edge_index": e.numpy()})[0]
    else:
        if fmt == "torchscript":
            run = torch.jit.load(str(exported))
        else:
            from torch._inductor import aoti_load_package

            run = aoti_load_package(str(exported))
    assert len(run(x, e)) == 3 and len(run(x[:1], e[:, :0])) == 0 and len(run(x[:0], e[:, :0])) == 0
    for name, (make, got) in BAD_INPUTS.items():
        with pytest.raises(Exception) as refused:
            run(*make(x, e))
        if fmt == "onnx":  # onnxruntime checks the graph's declared inputs (its own words)
            assert "INVALID_ARGUMENT" in str(refused.value), (name, str(refused.value))
            continue
        line = str(refused.value).strip().splitlines()[-1]
        what = f"node_features must be (N, {WIDTH}) float32 ({INPUTS.describe()})"
        if "edges" in name:
            what = "edge_index must be (2, E) int64 (inner hit first)"
        assert f"partgnn edge classifier: {what}" in line and line.endswith(got), (name, line)


def test_given_x_y_z_the_features_are_the_graph_files_own(sample: dict, tmp_path: Path):
    """ACTS's ``nodeFeatures = [X, Y, Z, ...]`` (scales 1): the file computes r and phi from
    the hits' float32 positions as partgnn's graphs are made, so its scores are ``partgnn
    infer``'s within the network's rounding (no float32 phi first)."""
    exported = tmp_path / "model.torchscript"
    scales = ",".join(["1", "1", "1", *(f"{s!r}" for s in KEPT.values())])
    xyz = ["--node-features", _columns("x", "y", "z"), "--feature-scales", scales]
    assert main(["export", MODEL, "--format", "torchscript", "--out", str(exported), *xyz]) == 0
    scores, convention = _scored_without_partgnn(
        exported, "torchscript", sample["work"] / "graph-xyz.npz", tmp_path / "logits.npz"
    )
    assert convention["node_feature_columns"] == ["x", "y", "z", *KEPT]
    assert np.abs(scores - sample["infer"]).max() < FILE_TOLERANCE
    code = main(["export", MODEL, "--format", "onnx", "--out", str(tmp_path / "m.onnx"), *xyz])
    assert code == 2 and not (tmp_path / "m.onnx").exists()


def test_export_refuses_what_it_cannot_write_in_one_line(sample: dict, tmp_path: Path, capsys):
    exported = tmp_path / "model.pt"
    exported.write_text("mine")
    assert main(["export", MODEL, "--format", "torchscript", "--out", str(exported)]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err.endswith(
            "exists (a file partgnn did not write); export replaces only a model partgnn exported "
            "without --overwrite: choose another output, or add --overwrite"
        )
        and "\n" not in err
    )
    assert exported.read_text() == "mine"
    code = main(["export", MODEL, "--format", "onnx", "--out", str(tmp_path / "m.onnx"),
                 "--node-features", _columns("r", "phi")])  # fmt: skip
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


def test_onnx_without_eta_loads_in_onnxruntime_and_scores_as_the_module(
    sample: dict, tmp_path: Path
):
    """``--node-features r,phi,z,...`` (the guide's example): eta is computed inside without
    onnxruntime's missing float64 Asinh (issue 67: the file could not be loaded), and the file
    was loaded and run once before it was said written."""
    import onnxruntime

    exported = tmp_path / "m.onnx"
    assert main(["export", MODEL, "--format", "onnx", "--out", str(exported),
                 "--node-features", _columns("r", "phi", "z")]) == 0  # fmt: skip
    graph = np.load(sample["work"] / "graph.npz")
    features = torch.from_numpy(np.delete(graph["node_features"], 3, axis=1))  # no eta
    edges = torch.from_numpy(graph["edge_index"])
    session = onnxruntime.InferenceSession(str(exported))
    logits = session.run(None, {"node_features": features.numpy(), "edge_index": edges.numpy()})
    model, _ = load_trained_model(MODEL, WIDTH, 7, torch.device("cpu"))
    inputs = NodeInputs(
        ("r", "phi", "z", *KEPT), (1000.0, np.pi, 1000.0, *KEPT.values()), tuple(KEPT)
    )
    module = ExportedEdgeClassifier(model, inputs, FEATURES)
    module.sums_by_prefix = True
    with torch.no_grad():
        expected = torch.sigmoid(module(features, edges)).numpy()
    scores = 1.0 / (1.0 + np.exp(-logits[0].astype(np.float64)))
    assert np.abs(scores - expected).max() < FORMAT_TOLERANCE["onnx"]


def test_acts_names_negative_scales_and_the_pt2_suffix(tmp_path: Path, capsys):
    """ACTS's column names in capitals are partgnn's; a negative scale reaches the scales'
    check (not argparse's "expected one argument"); an AOTI package must end in .pt2."""
    inputs = NodeInputs.parse("R,Phi,Z,Eta", None)
    assert inputs.columns == ("r", "phi", "z", "eta") and inputs.scales[0] == 1000.0
    out = tmp_path / "m.onnx"
    assert main(["export", MODEL, "--format", "onnx", "--out", str(out), "--node-features",
                 "R,Phi,Z", "--feature-scales", "-1,2,3"]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert err == "partgnn: error: feature scales must be finite and > 0 (got [-1.0, 2.0, 3.0])"
    package = tmp_path / "m.aoti"
    assert main(["export", MODEL, "--format", "aoti", "--out", str(package)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"partgnn: error: {package}: an AOTInductor package is a .pt2 file (its loaders read "
        "the name): name it NAME.pt2"
    )
    assert not out.exists() and not package.exists()


def test_score_exported_says_what_is_wrong_in_one_line(sample: dict, tmp_path: Path):
    """tools/score_exported.py on a file of another format, a graph without its keys, an
    output folder that is not there, and inputs the file refuses (issue 67: tracebacks)."""
    exported = tmp_path / "m.pt"
    assert main(["export", MODEL, "--format", "torchscript", "--out", str(exported)]) == 0
    graph, bad, narrow = sample["work"] / "graph.npz", tmp_path / "bad.npz", tmp_path / "n.npz"
    np.savez(bad, x=np.zeros(3))
    with np.load(graph) as arrays:
        np.savez(narrow, node_features=arrays["node_features"][:, :3].copy(),
                 edge_index=arrays["edge_index"])  # fmt: skip
    tool = REPOSITORY / "tools" / "score_exported.py"
    for fmt, given, out, said in (
        ("onnx", graph, tmp_path / "l.npz", f"{exported}: not an ONNX file partgnn exported ("),
        ("torchscript", bad, tmp_path / "l.npz", f"{bad}: not a graph .npz with node_features"),
        ("torchscript", graph, tmp_path / "no" / "l.npz", "l.npz: its folder does not exist"),
        ("torchscript", narrow, tmp_path / "l.npz", f"node_features must be (N, {WIDTH}) float32"),
    ):
        result = run_command([sys.executable, str(tool), str(exported), "--format", fmt,
                              "--graph", str(given), "--out", str(out)])  # fmt: skip
        err = result.stderr.strip()
        assert result.returncode == 1 and "\n" not in err and said in err, err


def test_the_same_torchscript_export_is_the_same_bytes(tmp_path: Path):
    """Two exports in processes of other string hashing (PYTHONHASHSEED) write the same bytes
    (issue 67: every export differed: the staging file's name, torch's random serialization
    identifier, the order of a module's constants), and the file loads and scores."""
    files = [tmp_path / "a.pt", tmp_path / "b.pt"]
    for seed, path in zip(("1", "2"), files, strict=True):
        result = run_command(
            [sys.executable, "-m", "partgnn", "export", "pretrained:trackml-pt1", "--format",
             "torchscript", "--out", str(path)],
            env={**os.environ, "PYTHONHASHSEED": seed},
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-2000:]
    assert files[0].read_bytes() == files[1].read_bytes()
    scripted = torch.jit.load(str(files[0]))
    assert scripted(torch.rand(5, 4), torch.tensor([[0, 1], [1, 2]])).shape == (2,)
