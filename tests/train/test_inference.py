"""Distributed inference: scores in the global edge order, the same for P = 1, 2 and 4."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from partgnn.cli.main import main
from partgnn.data.files.storage import GraphFile, ScoresFile
from partgnn.distributed.process_group import destroy_distributed, init_distributed
from partgnn.partition.event_split import PartitionOptions
from partgnn.partition.shard_writer import write_shards
from partgnn.train.config.config_file import load_config
from partgnn.train.inference import load_trained_model
from partgnn.train.items.standardisation import SCALER_FILE
from partgnn.train.trainer import Trainer
from tests.distributed.launch import assert_all_succeeded, launch
from tests.train.conftest import write_config


@pytest.fixture(scope="module")
def checkpoint(dataset, tmp_path_factory):
    folder = tmp_path_factory.mktemp("inference")
    config = write_config(
        folder / "full.yaml",
        data={"graphs": str(dataset["graphs"])},
        optim={"max_steps": 4, "epochs": 4},
        run={"dir": str(folder / "run"), "dtype": "float32"},
    )
    context = init_distributed(device="cpu", timeout_s=60)
    try:
        Trainer(load_config(config), context).fit()
    finally:
        destroy_distributed(context)
    return folder / "run" / "checkpoints" / "last.pt"


def _scores(path) -> dict[int, np.ndarray]:
    with ScoresFile(path) as scores:
        return {event_id: scores[i] for i, event_id in enumerate(scores.event_ids)}


def _infer_whole(checkpoint, graphs, out) -> None:
    args = ["infer", "--checkpoint", str(checkpoint), "--graphs", str(graphs), "--out", str(out)]
    assert main([*args, "--device", "cpu"]) == 0


@pytest.mark.slow
def test_partitioned_scores_equal_single_process(dataset, checkpoint, tmp_path, capsys):
    whole = tmp_path / "whole.h5"
    _infer_whole(checkpoint, dataset["graphs"], whole)
    one = tmp_path / "p1.h5"
    assert (
        main(
            [
                "infer",
                "--checkpoint",
                str(checkpoint),
                "--shards",
                str(dataset["phi1"]),
                "--out",
                str(one),
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    reference = _scores(whole)
    with GraphFile(dataset["graphs"]) as graphs:
        assert sorted(reference) == graphs.event_ids
        for index, event_id in enumerate(graphs.event_ids):
            assert reference[event_id].shape == (graphs[index].edge_index.shape[1],)
    for world_size in (2, 4):
        out = tmp_path / f"p{world_size}.h5"
        results = launch(
            world_size,
            "partgnn",
            [
                "infer",
                "--checkpoint",
                str(checkpoint),
                "--shards",
                str(dataset[f"phi{world_size}"]),
                "--out",
                str(out),
                "--device",
                "cpu",
            ],
            workdir=tmp_path / f"logs{world_size}",
        )
        assert_all_succeeded(results)
        for scores in (_scores(one), _scores(out)):
            for event_id, values in reference.items():
                assert np.abs(scores[event_id] - values).max() <= 1e-5
    capsys.readouterr()
    report = tmp_path / "metrics.json"
    assert (
        main(
            [
                "evaluate",
                str(out),
                "--graphs",
                str(dataset["graphs"]),
                "--shards",
                str(dataset["phi2"]),
                "--out",
                str(report),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "edge metrics" in printed and "track metrics" in printed
    metrics = json.loads(report.read_text())
    assert metrics["events"] == 4
    assert 0.0 <= metrics["edge"]["efficiency"] <= 1.0
    assert 0.5 <= metrics["edge"]["auc"] <= 1.0


def test_scores_from_another_graphs_file_are_refused(dataset, checkpoint, tmp_path, capsys):
    out = tmp_path / "scores.h5"
    _infer_whole(checkpoint, dataset["graphs"], out)
    other = tmp_path / "other.h5"
    other.write_bytes(dataset["graphs"].read_bytes() + b"\0")
    capsys.readouterr()
    assert main(["evaluate", str(out), "--graphs", str(other)]) == 2
    assert "scores were made from another file" in capsys.readouterr().err


def test_evaluate_selected_events_only(dataset, checkpoint, tmp_path, capsys):
    out = tmp_path / "scores.h5"
    _infer_whole(checkpoint, dataset["graphs"], out)
    report = tmp_path / "metrics.json"
    assert (
        main(
            [
                "evaluate",
                str(out),
                "--graphs",
                str(dataset["graphs"]),
                "--event-ids",
                "2",
                "3",
                "--out",
                str(report),
            ]
        )
        == 0
    )
    assert json.loads(report.read_text())["events"] == 2
    capsys.readouterr()
    assert (
        main(["evaluate", str(out), "--graphs", str(dataset["graphs"]), "--event-ids", "77"]) == 2
    )
    assert f"{out}: no scores for event 77" in capsys.readouterr().err


@pytest.mark.slow
def test_overlapping_sectors_of_steps_plus_one_hops_equal_the_full_graph(
    dataset, checkpoint, tmp_path, capsys
):
    # The checkpoint's model has 3 message-passing steps: sectors extended by 4 hops score every
    # edge into their owned nodes exactly as the whole graph does, without any exchange; 1 hop
    # is not enough, and naive sectors (no margin) never score the cut edges.
    whole = tmp_path / "whole.h5"
    _infer_whole(checkpoint, dataset["graphs"], whole)
    reference = _scores(whole)
    scores = {}
    for margin in (4, 1):
        shards = tmp_path / f"phi3-margin{margin}"
        write_shards(
            dataset["graphs"],
            shards,
            PartitionOptions(n_parts=3, method="phi", margin=margin),
            progress=False,
        )
        out = tmp_path / f"overlap{margin}.h5"
        results = launch(
            3,
            "partgnn",
            [
                "infer",
                "--checkpoint",
                str(checkpoint),
                "--shards",
                str(shards),
                # the old option for 1 hop: --naive on shards with a margin scores them
                *(["--mode", "overlapping"] if margin == 4 else ["--naive"]),
                "--out",
                str(out),
                "--device",
                "cpu",
            ],
            workdir=tmp_path / f"logs{margin}",
        )
        assert_all_succeeded(results)
        scores[margin] = _scores(out)
        with ScoresFile(out) as scores_file:
            assert scores_file.attrs["sector_margin"] == margin
            assert scores_file.attrs["mode"] == "overlapping"
    for event_id, values in reference.items():
        assert np.abs(scores[4][event_id] - values).max() <= 1e-5, event_id
    worst = max(np.abs(scores[1][e] - v).max() for e, v in reference.items())
    assert worst > 1e-3
    # The evaluation splits track efficiency by the sectors a particle's hits span.
    report = tmp_path / "metrics.json"
    evaluate = ["evaluate", str(tmp_path / "overlap4.h5"), "--graphs", str(dataset["graphs"])]
    assert main([*evaluate, "--shards", str(tmp_path / "phi3-margin4"), "--out", str(report)]) == 0
    track = json.loads(report.read_text())["track"]
    assert track["split_by_sector"] and track["n_spanning_targets"] > 0
    assert track["n_reconstructed_spanning"] <= track["n_reconstructed_targets"]
    capsys.readouterr()


def test_standardisation_round_trip_train_checkpoint_infer(dataset, checkpoint, tmp_path):
    # The statistics training fitted are in the checkpoint (as in input_scaler.json), and
    # inference applies them: its scores are the trained model's on the raw inputs, and differ
    # from the same weights without the standardisation.
    fitted = json.loads((checkpoint.parents[1] / SCALER_FILE).read_text())
    with GraphFile(dataset["graphs"]) as graphs:
        graph = graphs[0]
        model, dtype = load_trained_model(
            checkpoint, graph.x.shape[1], graph.edge_attr.shape[1], torch.device("cpu")
        )
    scaler = model.input_scaler
    for key in ("node_mean", "node_std", "edge_mean", "edge_std"):
        values = getattr(scaler, key).to(torch.float64)
        assert torch.allclose(values, torch.tensor(fitted[key], dtype=torch.float64)), key
    assert not torch.allclose(scaler.edge_std, torch.ones_like(scaler.edge_std))
    out = tmp_path / "scores.h5"
    _infer_whole(checkpoint, dataset["graphs"], out)
    inputs = (graph.x.to(dtype), graph.edge_index, graph.edge_attr.to(dtype))
    with torch.no_grad():
        expected = torch.sigmoid(model(*inputs)).to(torch.float64).numpy()
        scaler.set_statistics(
            torch.zeros_like(scaler.node_mean),
            torch.ones_like(scaler.node_std),
            torch.zeros_like(scaler.edge_mean),
            torch.ones_like(scaler.edge_std),
        )
        unscaled = torch.sigmoid(model(*inputs)).to(torch.float64).numpy()
    scores = _scores(out)[int(graph.event_id)]
    assert np.abs(scores - expected).max() <= 1e-6
    assert np.abs(scores - unscaled).max() > 1e-3
