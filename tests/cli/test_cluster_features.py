"""Cluster features through the commands: simulated and imported events carry them, their graphs
keep them, a model trains on acorn's cell features and scores the real sample with them; a file
without them, or a bad cells file, is refused in one line with nothing written."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from partgnn.cli.main import main
from partgnn.data.files.storage import EventFile, GraphFile, ScoresFile
from partgnn.data.formats.cluster_shapes import CLUSTER_COLUMNS, CLUSTER_FEATURES
from partgnn.train.inference import score_graphs
from tests.train.conftest import write_config

#: Exa.TrkX's TrackML node features under acorn's names and scales (acorn's Example_3).
NODE_FEATURES = [{"r": 1000}, {"phi": 3.14}, {"z": 1000}, "cell_count", "cell_val", "leta",
                 "lphi", {"lx": 0.1}, "ly", {"lz": 0.1}, "geta", {"gphi": 3.14}]  # fmt: skip


@pytest.fixture(scope="module")
def files(sample_dir, tmp_path_factory) -> dict[str, Path]:
    """Simulated events and the real sample (with and without its cells), and their graphs."""
    work = tmp_path_factory.mktemp("clusters")
    paths = {name: work / f"{name}.h5" for name in ("sim", "real", "bare")}
    assert main(["simulate", "--events", "3", "--pileup", "3", "--seed", "4",
                 "--out", str(paths["sim"])]) == 0  # fmt: skip
    assert main(["import-trackml", str(sample_dir), "--out", str(paths["real"])]) == 0
    assert main(["import-trackml", str(sample_dir), "--ignore-cells",
                 "--out", str(paths["bare"])]) == 0  # fmt: skip
    for name in list(paths):
        graphs = work / f"{name}-graphs.h5"
        assert main(["build-graphs", str(paths[name]), "--out", str(graphs)]) == 0
        paths[f"{name}-graphs"] = graphs
    return paths


def test_events_and_graphs_carry_the_cluster_features(files):
    for name in ("sim", "real"):
        with EventFile(files[name]) as events:
            clusters = events[0].clusters
        assert list(clusters.columns) == list(CLUSTER_COLUMNS)
        with GraphFile(files[f"{name}-graphs"]) as graphs:
            kept = graphs.extra(0)
            assert set(kept) == set(CLUSTER_FEATURES)
            assert all(len(v) == graphs[0].num_nodes for v in kept.values())
    with EventFile(files["bare"]) as events:
        assert events[0].clusters is None
    with GraphFile(files["bare-graphs"]) as graphs:
        assert graphs.extra(0) == {}


def test_a_model_trains_on_cell_features_and_scores_the_real_sample(files, tmp_path, capsys):
    config = write_config(tmp_path / "run.yaml",
                          data={"graphs": str(files["sim-graphs"]), "node_features": NODE_FEATURES},
                          run={"dir": str(tmp_path / "run")}, optim={"max_steps": 2})  # fmt: skip
    assert main(["train", "--config", str(config)]) == 0
    checkpoint = tmp_path / "run" / "checkpoints" / "last.pt"
    saved = torch.load(checkpoint, weights_only=True)
    assert saved["model"]["node_encoder.0.weight"].shape[1] == len(NODE_FEATURES)
    scores = tmp_path / "scores.h5"
    assert main(["infer", "--checkpoint", str(checkpoint), "--graphs", str(files["real-graphs"]),
                 "--out", str(scores), "--device", "cpu"]) == 0  # fmt: skip
    with ScoresFile(scores) as scored:
        assert np.isfinite(scored[0]).all()
        # the library's scoring of a graphs file reads the columns the checkpoint records too
        here = list(score_graphs(checkpoint, files["real-graphs"], torch.device("cpu")))
        assert len(here) == 1 and np.array_equal(here[0][1].astype(np.float32), scored[0])
    capsys.readouterr()
    lacking = tmp_path / "lacking.h5"
    assert main(["infer", "--checkpoint", str(checkpoint), "--graphs", str(files["bare-graphs"]),
                 "--out", str(lacking), "--device", "cpu"]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "has no per-hit field cell_count" in err, err
    assert "a model of hit positions only, such as pretrained:trackml-full-positions" in err
    assert not lacking.exists()


def test_a_bad_cells_file_stops_the_import_with_nothing_written(sample_dir, tmp_path, capsys):
    for path in sample_dir.glob("event000000001-*.csv.gz"):
        shutil.copy(path, tmp_path)
    (tmp_path / "event000000001-cells.csv.gz").unlink()
    (tmp_path / "event000000001-cells.csv").write_text("hit_id,ch0,ch1,value\n999999,1,1,0.5\n")
    out = tmp_path / "events.h5"
    assert main(["import-trackml", str(tmp_path), "--out", str(out)]) == 2
    # (the progress bar's lines come first)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("partgnn: error:") and "hit_id 999999 in data row 1 is not a hit" in err
    assert not out.exists()


def test_graphs_of_events_with_cells_need_the_modules_to_read_them(files, tmp_path, capsys):
    source = Path(__file__).resolve().parents[2] / "configs" / "detector" / "trackml.yaml"
    text = "\n".join(
        line for line in source.read_text().splitlines() if not line.startswith("modules:")
    )
    geometry = tmp_path / "no-modules.yaml"
    geometry.write_text(text)
    out = tmp_path / "graphs.h5"
    argv = ["build-graphs", str(files["real"]), "--geometry", str(geometry), "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "its hits have cells, but geometry" in err and "no module table" in err, err
    assert not out.exists()
