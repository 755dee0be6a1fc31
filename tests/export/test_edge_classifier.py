"""The exported module computes what partgnn's model computes: partgnn's features from the
space points' columns, and the same logits from them (every architecture it can export)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from partgnn.data.formats.cluster_shapes import CLUSTER_FEATURES
from partgnn.data.graphs.graph_features import graph_features
from partgnn.errors import InputError
from partgnn.export.edge_classifier import ExportedEdgeClassifier
from partgnn.export.node_inputs import CLUSTER_ACTS_NAMES, NodeInputs, acts_name
from partgnn.models.interaction_network import AGGREGATIONS, InteractionNetwork


def _positions(n_hits: int = 60, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hits ``(N, 3)`` [mm] along a few curved tracks through the barrel and an endcap, some
    across phi = pi, and edges ``src -> dst`` between consecutive hits of a track."""
    rng = np.random.default_rng(seed)
    tracks, per_track = n_hits // 6, 6
    phi0 = rng.uniform(-math.pi, math.pi, tracks)
    phi0[:2] = [math.pi - 0.01, -math.pi + 0.005]  # tracks that cross phi = +-pi
    # (each track its own radii: an edge between hits at one radius divides by +-MIN_DR, whose
    # sign the last bit of r decides)
    r = np.tile(np.linspace(40.0, 900.0, per_track), tracks) + np.repeat(
        np.arange(tracks), per_track
    )
    phi = np.repeat(phi0, per_track) + np.repeat(rng.uniform(-0.05, 0.05, tracks), per_track) * (
        r / 1000.0
    )
    z = np.repeat(rng.uniform(-3.0, 3.0, tracks), per_track) * r + rng.normal(0, 1, r.size)
    xyz = np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=1)
    first = np.arange(tracks * per_track).reshape(tracks, per_track)
    src, dst = first[:, :-1].reshape(-1), first[:, 1:].reshape(-1)
    noise = rng.integers(0, tracks * per_track, (2, 30))  # and some wrong edges
    return xyz, np.concatenate([src, noise[0]]), np.concatenate([dst, noise[1]])


def _model(seed: int = 0, **settings) -> InteractionNetwork:
    torch.manual_seed(seed)
    model = InteractionNetwork(node_features=4, edge_features=7, hidden=16, steps=3, **settings)
    generator = torch.Generator().manual_seed(seed)
    model.input_scaler.set_statistics(
        torch.rand(4, generator=generator), 0.5 + torch.rand(4, generator=generator),
        torch.rand(7, generator=generator), 0.5 + torch.rand(7, generator=generator),
    )  # fmt: skip
    return model.eval()


def _columns(xyz: np.ndarray, inputs: NodeInputs) -> torch.Tensor:
    """The columns ``inputs`` names, from positions, in float64 (no rounding of the inputs)."""
    r = np.hypot(xyz[:, 0], xyz[:, 1])
    values = {
        "r": r,
        "phi": np.arctan2(xyz[:, 1], xyz[:, 0]),
        "z": xyz[:, 2],
        "eta": np.arcsinh(xyz[:, 2] / r),
        "x": xyz[:, 0],
        "y": xyz[:, 1],
    }
    columns = [values[c] / s for c, s in zip(inputs.columns, inputs.scales, strict=True)]
    return torch.from_numpy(np.stack(columns, axis=1))


@pytest.mark.parametrize(
    "inputs",
    [
        NodeInputs(),
        NodeInputs(("z", "r", "phi"), (1.0, 1.0, 1.0)),  # raw mm and rad, eta computed
        NodeInputs(("phi", "eta", "r", "z"), (3.141592654, 1.0, 1000.0, 10.0)),
        NodeInputs(("x", "y", "z"), (1.0, 1.0, 1.0)),  # r and phi computed
    ],
)
def test_the_features_are_partgnns_from_any_columns(inputs: NodeInputs):
    xyz, src, dst = _positions()
    x, edge_attr = graph_features(xyz, src, dst)
    module = ExportedEdgeClassifier(_model(), inputs)
    edge_index = torch.from_numpy(np.stack([src, dst]))
    got_x, got_edges = module.features(_columns(xyz, inputs), edge_index)
    assert got_x.dtype == got_edges.dtype == torch.float32
    # the same formulas in float64, rounded to float32: equal but for the last bit
    torch.testing.assert_close(got_x, torch.from_numpy(x), rtol=2e-7, atol=1e-7)
    torch.testing.assert_close(got_edges, torch.from_numpy(edge_attr), rtol=2e-7, atol=1e-7)


ARCHITECTURES = [{"aggregation": aggregation} for aggregation in AGGREGATIONS] + [
    {"residual": False},
    {"shared_weights": True},
    {"concat_initial": True},
    {"mlp_layers": 3, "activation": "relu", "layer_norm": False},
]


@pytest.mark.parametrize(
    "settings", ARCHITECTURES, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items())
)
@pytest.mark.parametrize("by_prefix", [False, True], ids=["scatter", "prefix-sums"])
def test_the_logits_are_the_models(settings: dict, by_prefix: bool):
    xyz, src, dst = _positions(seed=1)
    x, edge_attr = (torch.from_numpy(a) for a in graph_features(xyz, src, dst))
    edge_index = torch.from_numpy(np.stack([src, dst]))
    model = _model(seed=2, **settings)
    module = ExportedEdgeClassifier(model, NodeInputs())
    module.sums_by_prefix = by_prefix  # (how the ONNX file sums)
    with torch.no_grad():
        # In float64 the two formulations agree to rounding: the same function.
        exact = module.double().classify(x.double(), edge_attr.double(), edge_index)
        expected = model.double()(x.double(), edge_index, edge_attr.double())
        torch.testing.assert_close(exact, expected, rtol=1e-10, atol=1e-10)
        # In float32, the exported module as it is written, within float32's rounding.
        module, model = module.float(), model.float()
        torch.testing.assert_close(
            module(_columns(xyz, NodeInputs()).float(), edge_index),
            model(x, edge_index, edge_attr), rtol=1e-4, atol=1e-4,
        )  # fmt: skip


def test_a_graph_batch_norm_model_is_refused_in_one_line():
    model = _model(batch_norm=True, layer_norm=False)
    with pytest.raises(InputError, match=r"model\.batch_norm: .* not exportable") as error:
        ExportedEdgeClassifier(model, NodeInputs())
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("columns", "scales", "message"),
    [
        ("r,phi,w", None, "'w' is not one of r, phi, z, eta, x, y"),
        ("r,phi", None, "z missing"),
        ("x,z,eta", None, "r, phi missing"),
        ("r,phi,z,r", None, "a column named twice"),
        ("r,phi,z", "1000,3.14", "2 for 3 node features"),
        ("r,phi,z", "1000,0,1000", "finite and > 0"),
        ("r,phi,z", "a,b,c", "not numbers"),
    ],
)
def test_bad_node_inputs_are_refused_in_one_line(columns, scales, message):
    with pytest.raises(InputError, match=message) as error:
        NodeInputs.parse(columns, scales)
    assert "\n" not in str(error.value)


def test_the_default_inputs_are_partgnns_node_features():
    inputs = NodeInputs.parse(None, None)
    assert inputs.columns == ("r", "phi", "z", "eta")
    assert inputs.scales == (1000.0, math.pi, 1000.0, 1.0)
    assert inputs.describe() == "r / 1000, phi / 3.14159, z / 1000, eta"
    assert NodeInputs.parse("r,phi,z", None).scales == (1000.0, math.pi, 1000.0)
    assert NodeInputs.parse("x,y,z", None).scales == (1000.0, 1000.0, 1000.0)  # lengths in m


def test_cluster_features_go_by_acts_names():
    """Every cluster shape feature has ACTS's ``NodeFeature`` name, and ACTS's names select a
    model's kept cluster columns as partgnn's do."""
    assert {acts_name(name) for name in CLUSTER_FEATURES} == set(CLUSTER_ACTS_NAMES.values())
    assert acts_name("cell_count") == "CellCount" and acts_name("lx") == "LocDir01"
    kept = {"cell_count": 1.0, "leta": 1.0, "lx": 0.1}
    inputs = NodeInputs.parse("R,Phi,Z,Eta,CellCount,LocEta1,LocDir01", None, kept)
    assert inputs.columns == ("r", "phi", "z", "eta", "cell_count", "leta", "lx")
    assert inputs.scales[-3:] == (1.0, 1.0, 0.1)
    assert inputs.acts_names[-3:] == ("CellCount", "LocEta1", "LocDir01")
