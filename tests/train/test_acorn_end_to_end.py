"""A tracking group's way in: graphs with strip-cluster fields written as acorn files
(``export-acorn`` of graphs built here), read back (``import-acorn``), acorn's CTD 2023
configuration translated (``config from-acorn``) and trained on 2 ranks with halo exchange on
its 12 node features and 6 edge features."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from partgnn.cli.main import main
from partgnn.data.files.storage import GraphFile
from partgnn.data.files.writers import write_graphs
from tests.distributed.launch import assert_all_succeeded, launch
from tests.train.config.test_acorn_config import ACORN, CLUSTERS


@pytest.fixture(scope="module")
def with_strip_clusters(dataset, tmp_path_factory) -> Path:
    """The dataset's graphs with acorn's eight cluster fields per hit (stand-ins: the hit's
    position, the second strip moved by a 20 mrad stereo angle)."""
    out = tmp_path_factory.mktemp("strips") / "graphs.h5"
    with GraphFile(dataset["graphs"]) as graphs:
        items = []
        for index, graph in enumerate(graphs):
            pos = graph.pos.double().numpy()
            r, phi, z = np.hypot(pos[:, 0], pos[:, 1]), np.arctan2(pos[:, 1], pos[:, 0]), pos[:, 2]
            fields = {}
            for i, stereo in ((1, 0.0), (2, 0.02)):
                moved = z + stereo * r
                fields |= {
                    f"cluster_r_{i}": r, f"cluster_phi_{i}": phi + stereo * 1e-3,
                    f"cluster_z_{i}": moved, f"cluster_eta_{i}": np.arcsinh(moved / r),
                }  # fmt: skip
            items.append((graph, graphs.quality(index), fields))
    write_graphs(out, items)
    return out


def test_built_graphs_go_to_acorn_files_and_back(with_strip_clusters: Path, tmp_path: Path):
    acorn = tmp_path / "acorn"
    assert main(["export-acorn", "--graphs", str(with_strip_clusters), "--out", str(acorn)]) == 0
    files = sorted(acorn.glob("event*.pyg"))
    assert len(files) == 4
    back = tmp_path / "back.h5"
    assert main(["import-acorn", str(acorn), "--out", str(back)]) == 0
    with GraphFile(with_strip_clusters) as built, GraphFile(back) as imported:
        assert built.event_ids == imported.event_ids
        for index in range(len(built)):
            a, b = built[index], imported[index]
            assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.y, b.y)
            assert torch.allclose(a.x, b.x, atol=1e-6)  # (r, phi as float32 in the file)
            assert torch.allclose(a.edge_pt, b.edge_pt)
            kept = imported.extra(index)
            for name in CLUSTERS:
                assert np.allclose(kept[name], built.extra(index)[name])


def test_the_ctd_configuration_trains_on_two_ranks_with_halo(
    with_strip_clusters: Path, tmp_path: Path
):
    acorn = tmp_path / "acorn"
    assert main(["export-acorn", "--graphs", str(with_strip_clusters), "--out", str(acorn)]) == 0
    graphs, shards = tmp_path / "graphs.h5", tmp_path / "metis2"
    assert main(["import-acorn", str(acorn), "--out", str(graphs)]) == 0
    assert main(["partition", str(graphs), "--parts", "2", "--out", str(shards)]) == 0
    source = tmp_path / "gnn_train.yaml"
    run_dir = tmp_path / "run"
    source.write_text(yaml.safe_dump({**ACORN, "stage_dir": str(run_dir), "data_split": [3, 1, 0],
                                      "max_epochs": 3, "warmup": 1}))  # fmt: skip
    config = tmp_path / "run.yaml"
    assert main(["config", "from-acorn", str(source), "--out", str(config), "--graphs",
                 str(graphs), "--shards", str(shards)]) == 0  # fmt: skip
    argv = ["train", "--config", str(config), "--set", "run.progress=false", "--set",
            "run.tensorboard=false"]  # fmt: skip
    results = launch(2, "partgnn", argv, workdir=tmp_path / "logs")
    assert_all_succeeded(results)
    saved = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert saved["model"]["node_encoder.0.weight"].shape[1] == 12
    assert saved["model"]["edge_encoder.0.weight"].shape[1] == 6
    assert saved["config"]["mode"] == "halo" and saved["step"] == 9
    metrics = (run_dir / "metrics.csv").read_text().splitlines()
    assert len(metrics) > 1


def test_export_acorn_of_built_graphs_refuses_what_it_cannot_write(
    with_strip_clusters: Path, tmp_path: Path, capsys
):
    """Track labels need scores; scores of another file's events are named; nothing written."""
    out = tmp_path / "acorn"
    argv = ["export-acorn", "--graphs", str(with_strip_clusters), "--out", str(out)]
    assert main([*argv, "--tracks", "walk"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--tracks: give the SCORES" in err and not out.exists()
