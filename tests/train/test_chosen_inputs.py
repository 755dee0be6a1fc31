"""A run reads the input columns its config names (``data.node_features``): a file's own
per-hit field trains, the checkpoint records the list, scoring reads the same columns and
refuses a file that lacks one; the planner sizes the inputs from the list."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from partgnn.cli.main import main
from partgnn.data.files.storage import GraphFile, ScoresFile
from partgnn.data.files.writers import write_graphs
from partgnn.partition.event_split import PartitionOptions
from partgnn.partition.shard_writer import write_shards
from tests.distributed.launch import assert_all_succeeded, launch
from tests.train.conftest import write_config

NODE_FEATURES = ["r", "phi", "z", "eta", {"cluster_r_1": 1000}]
#: partgnn's seven and the one it derives, at acorn's scale of its rphislope (rad / pi).
SCORED_EDGE_FEATURES = ["dr", "dphi", "dz", "deta", "dR", "phi_slope", "z0",
                        {"rphi_slope": float(np.pi)}]  # fmt: skip


@pytest.fixture(scope="module")
def with_clusters(dataset, tmp_path_factory) -> Path:
    """The dataset's graphs with a per-hit field ``cluster_r_1`` (the hit's radius [mm], as a
    strip cluster's would be, shifted by 0.1 %) and a per-edge one ``edge_prior``."""
    out = tmp_path_factory.mktemp("clusters") / "graphs.h5"
    generator = np.random.default_rng(5)
    with GraphFile(dataset["graphs"]) as graphs:
        items = [
            (graph, graphs.quality(index), {
                "cluster_r_1": (graph.x[:, 0].double() * 1000 * 1.001).numpy(),
                "edge_prior": generator.random(graph.edge_index.shape[1]),
            })
            for index, graph in enumerate(graphs)
        ]  # fmt: skip
    write_graphs(out, items)
    return out


@pytest.fixture(scope="module")
def trained(with_clusters: Path, tmp_path_factory) -> dict[str, Path]:
    """A model trained (2 steps) on the five node columns and eight edge columns, and its
    scores of ``with_clusters``."""
    work = tmp_path_factory.mktemp("trained")
    config = write_config(work / "run.yaml", data={"graphs": str(with_clusters),
                          "node_features": NODE_FEATURES, "edge_features": SCORED_EDGE_FEATURES},
                          run={"dir": str(work / "run")}, optim={"max_steps": 2})  # fmt: skip
    assert main(["train", "--config", str(config)]) == 0
    checkpoint = work / "run" / "checkpoints" / "last.pt"
    scores = work / "scores.h5"
    assert main(["infer", "--checkpoint", str(checkpoint), "--graphs", str(with_clusters),
                 "--out", str(scores), "--device", "cpu"]) == 0  # fmt: skip
    return {"checkpoint": checkpoint, "scores": scores}


def test_a_files_field_trains_and_scores(trained, dataset, tmp_path: Path, capsys):
    saved = torch.load(trained["checkpoint"], weights_only=True)
    assert saved["config"]["data"]["node_features"] == NODE_FEATURES
    assert saved["model"]["node_encoder.0.weight"].shape[1] == 5  # the list's width
    with ScoresFile(trained["scores"]) as scored:
        assert len(scored) == 4 and np.isfinite(scored[0]).all()
    capsys.readouterr()
    lacking = tmp_path / "lacking.h5"
    argv = ["infer", "--checkpoint", str(trained["checkpoint"]), "--graphs",
            str(dataset["graphs"]), "--out", str(lacking), "--device", "cpu"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "has no per-hit field cluster_r_1" in err, err
    assert not lacking.exists()
    for argv, said in (
        (["--node-features", "r,phi,z,eta"], "the model reads cluster_r_1 (a field of its "
         "graphs files): give it as a node feature (--node-features r,phi,z,eta,cluster_r_1)"),
        (["--node-features", "r,phi,z,eta,cluster_r_2"], "'cluster_r_2' is not one of r, phi"),
        (["--node-features", "R,Phi,Z,Eta,Cluster1R", "--feature-scales", "1000,3.14,1000,1,0"],
         "feature scales must be finite and > 0"),
    ):  # fmt: skip
        assert main(["export", str(trained["checkpoint"]), "--format", "torchscript", "--out",
                     str(tmp_path / "n.pt"), *argv]) == 2  # fmt: skip
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and said in err, err


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_every_export_format_takes_the_kept_field(
    fmt: str, trained, with_clusters: Path, tmp_path: Path, capsys
):
    """Exported, the file takes the kept field as a node feature (ACTS's nodeFeatures, at the
    model's scale by default; its convention says so) and scores as infer does. (An AOTInductor
    package compiles the same module: tests/export/test_export_command.py compiles one; this
    one passed for the kept field too, at 23 s of the suite's time.)"""
    exported = tmp_path / f"m.{'pt2' if fmt == 'aoti' else fmt}"
    assert main(["export", str(trained["checkpoint"]), "--format", fmt, "--out",
                 str(exported)]) == 0  # fmt: skip
    assert "cluster_r_1 / 1000" in capsys.readouterr().out
    with GraphFile(with_clusters) as graphs, ScoresFile(trained["scores"]) as scored:
        graph, kept = graphs[0], graphs.extra(0)["cluster_r_1"]
        given = torch.cat([graph.x, torch.from_numpy(kept / 1000).float()[:, None]], dim=1)
        expected = torch.from_numpy(scored[0]).double()
    logits, convention = _run_exported(fmt, exported, given, graph.edge_index)
    assert torch.allclose(torch.sigmoid(logits.double()), expected, atol=1e-3)
    assert convention["node_feature_columns"] == ["r", "phi", "z", "eta", "cluster_r_1"]
    assert convention["feature_scales"] == [1000.0, pytest.approx(np.pi), 1000.0, 1.0, 1000.0]
    assert "(N, 5) float32" in convention["inputs"]["node_features"]
    assert convention["acts_node_features"] == ["R", "Phi", "Z", "Eta", "Cluster1R"]


def _run_exported(
    fmt: str, exported: Path, node_features: torch.Tensor, edge_index: torch.Tensor
) -> tuple[torch.Tensor, dict]:
    """The exported file's logits of one graph, and the calling convention it carries."""
    import json
    import zipfile

    if fmt == "torchscript":
        files = {"partgnn.json": ""}
        scripted = torch.jit.load(str(exported), _extra_files=files)
        return scripted(node_features, edge_index), json.loads(files["partgnn.json"])
    if fmt == "onnx":
        import onnx
        import onnxruntime

        session = onnxruntime.InferenceSession(str(exported))
        (logits,) = session.run(None, {"node_features": node_features.numpy(),
                                       "edge_index": edge_index.numpy()})  # fmt: skip
        meta = {p.key: p.value for p in onnx.load(str(exported)).metadata_props}
        return torch.from_numpy(logits), json.loads(meta["partgnn"])
    from torch._inductor import aoti_load_package

    with zipfile.ZipFile(exported) as package:
        name = next(n for n in package.namelist() if n.endswith("partgnn.json"))
        convention = json.loads(package.read(name))
    return aoti_load_package(str(exported))(node_features, edge_index), convention


def test_the_plan_sizes_the_inputs_from_the_list(with_clusters: Path, tmp_path: Path):
    from partgnn.train.config.config_file import load_config
    from partgnn.train.planning.plan import feature_widths

    data = {"graphs": str(with_clusters), "node_features": NODE_FEATURES,
            "edge_features": ["dr", "z0"]}  # fmt: skip
    config = write_config(tmp_path / "c.yaml", data=data)
    assert feature_widths(load_config(config)) == (5, 2)


EDGE_FEATURES = ["dr", "dphi", "dz", "deta", "dR", "phi_slope", "z0", "rphi_slope", "edge_prior"]


@pytest.mark.slow
def test_halo_with_chosen_inputs_equals_full_mode(with_clusters: Path, tmp_path: Path):
    """The shards carry the file's kept fields: halo on 2 ranks with a per-hit and a per-edge
    field among its inputs trains exactly the full graph's weights (float64); naive and
    overlapping sectors, and ddp on whole graphs, read them too."""
    shards = tmp_path / "shards"
    write_shards(with_clusters, shards, PartitionOptions(n_parts=2, method="phi", margin=4),
                 progress=False)  # fmt: skip
    runs = {}
    for mode in ("full", "halo", "naive", "overlapping", "ddp"):
        config = write_config(
            tmp_path / f"{mode}.yaml", mode=mode,
            data={"graphs": str(with_clusters), "shards": str(shards),
                  "node_features": NODE_FEATURES, "edge_features": EDGE_FEATURES},
            optim={"epochs": 3, "max_steps": 3}, run={"dir": str(tmp_path / mode)},
        )  # fmt: skip
        if mode == "full":
            assert main(["train", "--config", str(config)]) == 0
        else:
            results = launch(2, "partgnn", ["train", "--config", str(config)],
                             workdir=tmp_path / f"logs-{mode}")  # fmt: skip
            assert_all_succeeded(results)
        runs[mode] = torch.load(tmp_path / mode / "checkpoints" / "last.pt",
                                weights_only=True)["model"]  # fmt: skip
    full, halo = runs["full"], runs["halo"]
    for weights in runs.values():
        assert weights["node_encoder.0.weight"].shape[1] == 5
        assert weights["edge_encoder.0.weight"].shape[1] == 9
    worst = max(
        ((halo[k] - full[k]).norm() / full[k].norm().clamp(min=1e-300)).item() for k in full
    )
    assert worst <= 1e-9, f"float64 weights differ by {worst:.3g}"


def test_the_python_api_takes_the_same_lists(with_clusters: Path, tmp_path: Path):
    import partgnn
    from partgnn.train.config.sections import DataConfig, OptimConfig, RunConfig, TrainConfig

    config = TrainConfig(
        mode="full",
        data=DataConfig(
            graphs=str(with_clusters),
            node_features={"r": 1000, "cluster_r_1": 1000},
            edge_features=["dr", "edge_prior"],
        ),
        optim=OptimConfig(epochs=1, max_steps=1),
        run=RunConfig(dir=str(tmp_path / "run"), device="cpu", progress=False, tensorboard=False),
    )
    summary = partgnn.fit(config)
    assert summary.steps == 1
    saved = torch.load(tmp_path / "run" / "checkpoints" / "last.pt", weights_only=True)
    assert saved["model"]["node_encoder.0.weight"].shape[1] == 2
    assert saved["model"]["edge_encoder.0.weight"].shape[1] == 2


def test_a_checkpoint_of_other_inputs_is_refused_in_one_line(
    trained, with_clusters: Path, tmp_path: Path, capsys
):
    """Starting from (or resuming) a model trained on other columns: one line naming both lists,
    nothing trained (the same widths would load and read the wrong columns)."""
    other = ["r", "phi", "z", "eta", {"cluster_r_1": 500}]  # the same width, another scale
    config = write_config(tmp_path / "run.yaml", data={"graphs": str(with_clusters),
                          "node_features": other, "edge_features": SCORED_EDGE_FEATURES},
                          run={"dir": str(tmp_path / "run"),
                               "init_from": str(trained["checkpoint"])})  # fmt: skip
    capsys.readouterr()
    assert main(["train", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "the model was trained on node r/1000" in err, err
    assert "cluster_r_1/1000" in err and "cluster_r_1/500" in err
    assert not (tmp_path / "run" / "checkpoints" / "last.pt").exists()
