"""Leaving out the nodes no edge touches: the rows kept, the renumbered halo plans, and logits,
input statistics and trained weights equal to the whole graphs' (the multi-process halo and
naive comparisons with full mode in test_trainer.py run with them left out on every rank)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from partgnn.data.files.storage import GraphFile
from partgnn.models.config import ModelConfig
from partgnn.models.interaction_network import InteractionNetwork
from partgnn.partition.halo_plan import build_halo_plans
from partgnn.train.items.standardisation import SCALER_FILE
from partgnn.train.items.unconnected_nodes import connected_rows
from partgnn.train.run_directory.saved_model import SavedModel
from tests.train.conftest import train_full_mode, write_config


def _graph_with_unconnected_nodes(seed: int, n_nodes: int = 60, n_edges: int = 70):
    """Random directed edges among the first two thirds of the nodes; the rest touch none."""
    generator = np.random.default_rng(seed)
    reached = generator.permutation(n_nodes)[: 2 * n_nodes // 3]
    edge_index = generator.choice(reached, size=(2, n_edges))
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    return np.ascontiguousarray(edge_index), n_nodes


def test_rows_kept_are_the_touched_owned_ones_and_every_row_after_them():
    # 6 rows, 4 owned: owned row 1 and 3 touch no edge; row 5 (halo) touches none either.
    edge_index = torch.tensor([[0, 2, 4], [2, 4, 0]])
    rows = connected_rows(edge_index, n_nodes=6, n_owned=4)
    assert rows is not None
    assert rows.keep.tolist() == [True, False, True, False, True, True]
    assert rows.n_owned == 2 and rows.n_owned_before == 4
    assert rows.new_index.tolist() == [0, -1, 1, -1, 2, 3]
    assert rows.renumbered(edge_index).tolist() == [[0, 1, 2], [1, 2, 0]]
    values = torch.arange(6.0).unsqueeze(1)
    assert rows.rows(values).squeeze(1).tolist() == [0.0, 2.0, 4.0, 5.0]
    assert rows.left_out(values).squeeze(1).tolist() == [1.0, 3.0]


def test_nothing_to_leave_out_or_nothing_left_keeps_the_item_as_it_is():
    edge_index = torch.tensor([[0, 1], [1, 2]])
    assert connected_rows(edge_index, n_nodes=3, n_owned=3) is None
    assert connected_rows(torch.zeros(2, 0, dtype=torch.long), n_nodes=3, n_owned=3) is None


@pytest.mark.parametrize("n_parts", [2, 3])
def test_plans_without_unconnected_nodes_keep_their_edges_and_exchange(n_parts: int):
    edge_index, n_nodes = _graph_with_unconnected_nodes(seed=n_parts)
    assignment = np.random.default_rng(0).integers(0, n_parts, n_nodes)
    left_out = 0
    for plan in build_halo_plans(edge_index, assignment, n_parts):
        rows = connected_rows(torch.from_numpy(plan.edge_index), plan.n_local_nodes, plan.n_owned)
        assert rows is not None
        kept = rows.plan(plan)
        kept.validate()
        left_out += plan.n_owned - kept.n_owned
        # The same global edges between the same global nodes, the same halo and send lists.
        assert (kept.local_nodes[kept.edge_index] == plan.local_nodes[plan.edge_index]).all()
        assert (kept.edge_owned == plan.edge_owned).all()
        assert (kept.interior_edges == plan.interior_edges).all()
        assert (kept.halo_nodes == plan.halo_nodes).all()
        for peer in range(n_parts):
            assert (kept.send_nodes(peer) == plan.send_nodes(peer)).all()
        touched = np.zeros(kept.n_local_nodes, dtype=bool)
        touched[kept.edge_index.reshape(-1)] = True
        assert touched.all()
    assert left_out == n_nodes - np.unique(edge_index).size


def test_logits_without_unconnected_nodes_are_the_whole_graphs():
    edge_index, n_nodes = _graph_with_unconnected_nodes(seed=5)
    edge_index = torch.from_numpy(edge_index)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n_nodes, 4, generator=generator, dtype=torch.float64)
    edge_attr = torch.randn(edge_index.shape[1], 3, generator=generator, dtype=torch.float64)
    torch.manual_seed(0)
    model = InteractionNetwork(node_features=4, edge_features=3, hidden=16, steps=3).double()
    rows = connected_rows(edge_index, n_nodes, n_nodes)
    assert rows is not None and rows.n_owned < n_nodes
    whole = model(x, edge_index, edge_attr)
    kept = model(rows.rows(x), rows.renumbered(edge_index), edge_attr)
    torch.testing.assert_close(kept, whole, rtol=1e-12, atol=1e-12)


def test_only_models_they_cannot_affect_leave_them_out():
    assert ModelConfig().skips_unconnected_nodes
    assert not ModelConfig(skip_unconnected=False).skips_unconnected_nodes
    assert not ModelConfig(batch_norm=True, layer_norm=False).skips_unconnected_nodes
    assert not ModelConfig(target="tests.train.own_models:Tiny").skips_unconnected_nodes


def test_full_training_with_and_without_them_is_the_same(dataset, tmp_path):
    with GraphFile(dataset["graphs"]) as graphs:
        graph = graphs[0]
    assert connected_rows(graph.edge_index, graph.x.shape[0], graph.x.shape[0]) is not None

    def config(name: str, skip: bool):
        return write_config(
            tmp_path / f"{name}.yaml",
            data={"graphs": str(dataset["graphs"])},
            model={"hidden": 16, "steps": 3, "skip_unconnected": skip},
            optim={"epochs": 3, "max_steps": 3},
            run={"dir": str(tmp_path / name)},
        )

    left_out = train_full_mode(config("left-out", True))
    whole = train_full_mode(config("whole", False))
    weights = [
        SavedModel.read(run / "checkpoints" / "last.pt").weights for run in (left_out, whole)
    ]
    for name, value in weights[1].items():
        torch.testing.assert_close(weights[0][name], value, rtol=1e-12, atol=1e-15)
    # The input statistics count the nodes left out, in their order: the same numbers.
    scalers = [json.loads((run / SCALER_FILE).read_text()) for run in (left_out, whole)]
    assert scalers[0] == scalers[1]
    # ... while the steps computed fewer nodes.
    computed = [
        json.loads((run / "summary.json").read_text())["workload"]["computed_nodes"]
        for run in (left_out, whole)
    ]
    assert computed[0] < 0.9 * computed[1], computed
