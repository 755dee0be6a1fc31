"""Input standardisation: fitting, the run's record, and the round trip through inference."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from partgnn.data.files.storage import GraphFile
from partgnn.data.files.writers import write_graphs
from partgnn.errors import InputError
from partgnn.train.inference import load_trained_model, score_graphs
from partgnn.train.items.standardisation import SCALER_FILE, fit_feature_statistics
from partgnn.train.items.train_item import TrainItem
from partgnn.train.run_directory.checkpoints import load_checkpoint, save_checkpoint
from partgnn.train.run_directory.saved_model import SavedModel
from tests.train.conftest import train_full_mode, write_config


def _item(x: torch.Tensor, e: torch.Tensor, counted: torch.Tensor, n_owned: int) -> TrainItem:
    n_edges = e.shape[0]
    return TrainItem(
        event_id=0,
        x=x,
        edge_index=torch.zeros(2, n_edges, dtype=torch.long),
        edge_attr=e,
        y=torch.zeros(n_edges),
        counted=counted,
        boundary=torch.zeros(n_edges, dtype=torch.bool),
        normaliser=1.0,
        event_normaliser=1.0,
        n_owned=n_owned,
    )


def test_statistics_cover_owned_nodes_and_counted_edges_of_all_items():
    generator = torch.Generator().manual_seed(0)
    xs = [torch.randn(6, 3, generator=generator) * 5 + 2 for _ in range(2)]
    es = [torch.randn(7, 2, generator=generator) * 0.01 for _ in range(2)]
    counted = [torch.arange(7) % 2 == 0, torch.arange(7) < 5]
    items = [_item(xs[k], es[k], counted[k], n_owned=4) for k in range(2)]
    statistics = fit_feature_statistics(items)
    rows_x = torch.cat([x[:4] for x in xs]).double()
    rows_e = torch.cat([e[c] for e, c in zip(es, counted, strict=True)]).double()
    assert (statistics.n_nodes, statistics.n_edges) == (8, rows_e.shape[0])
    torch.testing.assert_close(statistics.node_mean, rows_x.mean(0))
    torch.testing.assert_close(statistics.node_std, rows_x.std(0, unbiased=False))
    torch.testing.assert_close(statistics.edge_mean, rows_e.mean(0))
    torch.testing.assert_close(statistics.edge_std, rows_e.std(0, unbiased=False))


def test_no_events_is_an_input_error():
    with pytest.raises(InputError, match="no training events"):
        fit_feature_statistics([])


@pytest.fixture(scope="module")
def trained(dataset, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("standardised")
    config = write_config(
        folder / "run.yaml",
        data={"graphs": str(dataset["graphs"])},
        optim={"max_steps": 2},
        run={"dir": str(folder / "run")},
    )
    return train_full_mode(config)


def test_training_records_the_statistics_of_its_training_events(dataset, trained):
    record = json.loads((trained / SCALER_FILE).read_text())
    assert record["edge_features"] == ["dr", "dphi", "dz", "deta", "dR", "phi_slope", "z0"]
    with GraphFile(dataset["graphs"]) as graphs:  # 4 events, the last one for validation
        training = [graphs[i] for i in range(3)]
    x = torch.cat([g.x for g in training]).double()
    e = torch.cat([g.edge_attr for g in training]).double()
    assert record["n_nodes"] == x.shape[0] and record["n_edges"] == e.shape[0]
    torch.testing.assert_close(torch.tensor(record["node_mean"]).double(), x.mean(0))
    torch.testing.assert_close(torch.tensor(record["edge_std"]).double(), e.std(0, unbiased=False))
    # The checkpoint's model carries the same statistics.
    state = SavedModel.read(trained / "checkpoints" / "last.pt").weights
    torch.testing.assert_close(
        state["input_scaler.edge_std"], torch.tensor(record["edge_std"], dtype=torch.float64)
    )


def test_inference_applies_the_training_standardisation(dataset, trained):
    checkpoint = trained / "checkpoints" / "last.pt"
    with GraphFile(dataset["graphs"]) as graphs:
        graph = graphs[3]
    model, dtype = load_trained_model(checkpoint, 4, 7, torch.device("cpu"))
    record = json.loads((trained / SCALER_FILE).read_text())
    # The same weights with an identity scaler, fed inputs standardised by hand.
    raw = load_trained_model(checkpoint, 4, 7, torch.device("cpu"))[0]
    raw.input_scaler.set_statistics(torch.zeros(4), torch.ones(4), torch.zeros(7), torch.ones(7))
    x = (graph.x.to(dtype) - torch.tensor(record["node_mean"], dtype=dtype)) / torch.tensor(
        record["node_std"], dtype=dtype
    )
    e = (graph.edge_attr.to(dtype) - torch.tensor(record["edge_mean"], dtype=dtype)) / torch.tensor(
        record["edge_std"], dtype=dtype
    )
    with torch.no_grad():
        expected = torch.sigmoid(raw(x, graph.edge_index, e))
    scores = dict(score_graphs(checkpoint, dataset["graphs"], torch.device("cpu")))
    torch.testing.assert_close(torch.from_numpy(scores[graph.event_id]), expected.double())
    assert model.input_scaler.node_std.tolist() != [1.0] * 4


def test_checkpoint_without_a_scaler_loads_as_raw_inputs(trained, tmp_path):
    state = load_checkpoint(trained / "checkpoints" / "last.pt")
    state["model"] = {k: v for k, v in state["model"].items() if not k.startswith("input_scaler.")}
    old = save_checkpoint(tmp_path, 1, state)
    model, _ = load_trained_model(old, 4, 7, torch.device("cpu"))
    assert model.input_scaler.node_std.tolist() == [1.0] * 4


def test_legacy_graphs_with_five_edge_features_train_and_a_new_model_refuses_them(
    dataset, trained, tmp_path
):
    legacy = tmp_path / "legacy-graphs.h5"
    with GraphFile(dataset["graphs"]) as graphs:
        old = []
        for graph in graphs:
            graph.edge_attr = graph.edge_attr[:, :5].contiguous()
            old.append((graph, {}))
    write_graphs(legacy, old)
    config = write_config(
        tmp_path / "legacy.yaml",
        data={"graphs": str(legacy)},
        optim={"max_steps": 1},
        run={"dir": str(tmp_path / "legacy")},
    )
    run_dir = train_full_mode(config)
    record = json.loads((run_dir / SCALER_FILE).read_text())
    assert record["edge_features"] == ["dr", "dphi", "dz", "deta", "dR"]
    with pytest.raises(InputError, match="weights do not fit 4 node and 5 edge features"):
        dict(score_graphs(trained / "checkpoints" / "last.pt", legacy, torch.device("cpu")))
