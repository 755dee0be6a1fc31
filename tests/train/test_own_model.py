"""One's own model, named by ``model.target``, trains in halo mode exactly as in full mode."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from torch_geometric.nn import GraphConv

from partgnn.distributed.process_group import destroy_distributed, init_distributed
from partgnn.errors import InputError
from partgnn.models.partitioned_layer import PartitionedLayer
from partgnn.train.config.config_file import load_config
from partgnn.train.run_directory.saved_model import SavedModel
from partgnn.train.trainer import Trainer
from tests.distributed.launch import assert_all_succeeded, launch
from tests.train.conftest import write_config

TARGET = "tests.train.test_own_model:TinyEdgeGNN"


class TinyEdgeGNN(nn.Module):
    """GraphConv node updates (through :class:`PartitionedLayer`), then an edge head.

    Follows docs/MODEL_CONTRACT.md: reads owned rows only, one exchange per layer and one for
    the head, the same calls on every rank; no ``input_scaler`` (inputs stay raw).
    """

    def __init__(self, *, node_features: int, edge_features: int, hidden: int = 8, layers: int = 2):
        super().__init__()
        self.encode = nn.Linear(node_features, hidden)
        self.convs = nn.ModuleList(
            PartitionedLayer(GraphConv(hidden, hidden, aggr="add")) for _ in range(layers)
        )
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Sequential(
            nn.Linear(2 * hidden + edge_features, hidden), nn.Tanh(), nn.Linear(hidden, 1)
        )

    def forward(self, x, edge_index, edge_attr, *, exchange=None, n_owned=None):
        if n_owned is None:
            n_owned = getattr(exchange, "n_owned", x.shape[0])
        h = torch.tanh(self.encode(x[:n_owned]))
        for conv in self.convs:
            h = self.norm(h + torch.tanh(conv(h, edge_index, exchange)))
        h_local = exchange(h) if exchange is not None else h
        src, dst = edge_index
        return self.head(torch.cat([h_local[src], h_local[dst], edge_attr], dim=-1)).squeeze(-1)


def _config(path: Path, dataset, mode: str, shards: str) -> Path:
    return write_config(
        path,
        mode=mode,
        data={"graphs": str(dataset["graphs"]), "shards": str(dataset[shards])},
        model={"target": TARGET, "kwargs": {"hidden": 6, "layers": 2}},
        optim={"epochs": 3, "max_steps": 3},
        run={"dir": str(path.with_suffix(""))},
    )


@pytest.mark.slow
def test_own_model_in_halo_mode_equals_full_mode(dataset, tmp_path: Path):
    full = _config(tmp_path / "full.yaml", dataset, "full", "phi1")
    context = init_distributed(device="cpu", timeout_s=60)
    try:
        Trainer(load_config(full), context).fit()
    finally:
        destroy_distributed(context)
    halo = _config(tmp_path / "halo.yaml", dataset, "halo", "phi2")
    results = launch(2, "partgnn", ["train", "--config", str(halo)], workdir=tmp_path / "logs")
    assert_all_succeeded(results)

    weights = {
        name: SavedModel.read(config.with_suffix("") / "checkpoints" / "last.pt")
        for name, config in (("full", full), ("halo", halo))
    }
    assert weights["halo"].config["model"]["target"] == TARGET
    reference = weights["full"].weights
    assert set(reference) == set(weights["halo"].weights)
    assert any(key.startswith("convs.") for key in reference)
    for key, value in reference.items():
        error = ((weights["halo"].weights[key] - value).norm() / value.norm()).item()
        assert error <= 1e-9, f"{key}: halo differs from full by {error:.3g}"


def test_a_bad_target_is_a_one_line_error(dataset, tmp_path: Path):
    cases = {
        "nowhere.at.all:Model": "cannot import nowhere.at.all",
        "tests.train.test_own_model:Missing": "has no Missing",
        "tests.train.test_own_model:TARGET": "is not a torch.nn.Module class",
        "no_colon": "must be package.module:Class",
    }
    for target, message in cases.items():
        config = write_config(
            tmp_path / "bad.yaml",
            data={"graphs": str(dataset["graphs"])},
            model={"target": target},
            run={"dir": str(tmp_path / "run")},
        )
        with pytest.raises(InputError, match=r"model\.target") as error:
            context = init_distributed(device="cpu", timeout_s=60)
            try:
                Trainer(load_config(config), context)
            finally:
                destroy_distributed(context)
        assert message in str(error.value) and "\n" not in str(error.value)


def test_kwargs_the_model_does_not_take_are_a_one_line_error(dataset, tmp_path: Path):
    config = write_config(
        tmp_path / "bad.yaml",
        data={"graphs": str(dataset["graphs"])},
        model={"target": TARGET, "kwargs": {"width": 3}},
        run={"dir": str(tmp_path / "run")},
    )
    context = init_distributed(device="cpu", timeout_s=60)
    try:
        with pytest.raises(InputError, match=r"model.kwargs \['width'\]"):
            Trainer(load_config(config), context)
    finally:
        destroy_distributed(context)


MARKED_MODULE = """
import os, pathlib
pathlib.Path(os.environ["PARTGNN_TEST_MARKER"]).write_text("imported")
from tests.train.test_own_model import TinyEdgeGNN as Marked
"""


def test_infer_imports_a_checkpoints_own_class_only_when_named(
    dataset, tmp_path: Path, monkeypatch, capsys
):
    import sys

    from partgnn.cli.main import main

    # A module whose import leaves a mark: the class a colleague's checkpoint names.
    (tmp_path / "marked_model.py").write_text(MARKED_MODULE)
    marker = tmp_path / "imported.txt"
    monkeypatch.setenv("PARTGNN_TEST_MARKER", str(marker))
    monkeypatch.syspath_prepend(str(tmp_path))
    config = write_config(
        tmp_path / "own.yaml",
        data={"graphs": str(dataset["graphs"])},
        model={"target": "marked_model:Marked", "kwargs": {"hidden": 4, "layers": 1}},
        optim={"max_steps": 1},
        run={"dir": str(tmp_path / "run")},
    )
    assert main(["train", "--config", str(config)]) == 0
    marker.unlink()
    monkeypatch.delitem(sys.modules, "marked_model")
    checkpoint = str(tmp_path / "run" / "checkpoints" / "last.pt")
    infer = ["infer", "--checkpoint", checkpoint, "--graphs", str(dataset["graphs"]),
             "--device", "cpu", "--out"]  # fmt: skip
    capsys.readouterr()
    for named in ([], ["--model-target", "other_module:Other"]):
        assert main([*infer, str(tmp_path / "s.h5"), *named]) == 2
        err = capsys.readouterr().err.strip()
        assert "--model-target marked_model:Marked" in err and len(err.splitlines()) == 1, err
        assert not marker.exists() and "marked_model" not in sys.modules  # nothing imported
    assert main([*infer, str(tmp_path / "s.h5"), "--model-target", "marked_model:Marked"]) == 0
    assert marker.read_text() == "imported"
