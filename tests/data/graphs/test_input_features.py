"""A model's input columns chosen by name: partgnn's own (bitwise at partgnn's scales,
rescaled otherwise), a file's per-hit and per-edge fields; bad lists refused in one line."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from partgnn.data.graphs.input_features import FeatureColumn, InputFeatures
from partgnn.errors import InputError


def _graph(n: int = 5, e: int = 4) -> Data:
    generator = torch.Generator().manual_seed(0)
    return Data(
        x=torch.rand(n, 4, generator=generator),
        pos=torch.rand(n, 3, generator=generator) * 1000,
        edge_index=torch.stack([torch.arange(e), torch.arange(1, e + 1)]),
        edge_attr=torch.rand(e, 7, generator=generator),
    )


def test_partgnn_s_own_columns_are_the_files_tables_bitwise():
    graph = _graph()
    x, edge_attr = InputFeatures.default().select(graph, {}, where="g.h5")
    assert x is graph.x and edge_attr is graph.edge_attr
    named = InputFeatures.parse(["r", "phi", "z", "eta"], ["dr", "dphi", "dz", "deta", "dR",
                                                           "phi_slope", "z0"])  # fmt: skip
    assert named.is_default


def test_columns_by_name_with_scales_and_the_files_fields():
    graph = _graph()
    extra = {"cluster_r_1": np.arange(5, dtype=np.float32) * 100, "edge_w": np.ones(4)}
    features = InputFeatures.parse(
        {"eta": 1, "r": 1, "cluster_r_1": 1000, "x": 1000}, [{"z0": 1000}, "edge_w"]
    )
    assert features.node[1] == FeatureColumn("r", 1.0) and features.widths == (4, 2)
    x, edge_attr = features.select(graph, extra, where="g.h5")
    assert torch.equal(x[:, 0], graph.x[:, 3])  # eta as stored
    expected_r = (graph.x[:, 0].double() * 1000).float()  # r in mm: stored r / 1000
    assert torch.equal(x[:, 1], expected_r)
    assert torch.equal(x[:, 2], torch.arange(5, dtype=torch.float32) / 10)
    assert torch.equal(x[:, 3], (graph.pos[:, 0].double() / 1000).float())
    assert torch.equal(edge_attr[:, 0], graph.edge_attr[:, 6])  # z0 at partgnn's scale
    assert torch.equal(edge_attr[:, 1], torch.ones(4))
    assert x.dtype == edge_attr.dtype == torch.float32


@pytest.mark.parametrize(
    ("node", "said"),
    [
        ([], "names no column"),
        ("r,phi", "must be a list of names or a mapping"),
        ([3], "3 is neither a name nor a one-entry mapping"),
        ({"r": 0}, "the scale of r must be finite and not 0 (got 0)"),
        ({"r": math.nan}, "the scale of r must be finite and not 0"),
        ({"r": "big"}, "the scale of r must be a number"),
        (["r", "r"], "r named twice"),
        (["r", "particle_pt"], "particle_pt is truth, not an input a model may read"),
        (["hit_particle_id"], "hit_particle_id is truth"),
    ],
)
def test_bad_lists_are_one_line(node, said):
    with pytest.raises(InputError) as refused:
        InputFeatures.parse(node, None, where="c.yaml")
    message = str(refused.value)
    assert message.startswith("c.yaml: data.node_features") and said in message, message


def test_a_field_the_graph_lacks_or_of_the_wrong_length_is_named():
    graph = _graph()
    features = InputFeatures.parse(["r", "cluster_r_1"], ["dr", "edge_w"])
    lacking = r"g\.h5: event 1: has no per-hit field cluster_r_1 \(the fields kept beside"
    with pytest.raises(InputError, match=lacking):
        features.select(graph, {}, where="g.h5: event 1")
    with pytest.raises(InputError, match=r"field edge_w is not per-edge: shape \(5,\)"):
        features.select(graph, {"cluster_r_1": np.ones(5), "edge_w": np.ones(5)}, where="g")
    with pytest.raises(InputError, match="field cluster_r_1 holds NaN or inf"):
        features.select(graph, {"cluster_r_1": np.full(5, np.nan), "edge_w": np.ones(4)},
                        where="g")  # fmt: skip


def test_rphi_slope_is_the_mean_radius_times_the_phi_slope():
    """acorn's rphislope (at scale pi): derived from the stored r and phi_slope, not stored."""
    graph = _graph()
    features = InputFeatures.parse(None, ["phi_slope", {"rphi_slope": math.pi}])
    assert not features.reads_kept_fields
    _, edge_attr = features.select(graph, {}, where="g.h5")
    r = graph.x[:, 0].double() * 1000
    mean_r = 0.5 * (r[graph.edge_index[0]] + r[graph.edge_index[1]])
    expected = mean_r * graph.edge_attr[:, 5].double() / 1000 / math.pi
    assert torch.equal(edge_attr[:, 1], expected.float())
