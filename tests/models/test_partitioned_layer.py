"""PartitionedLayer in one process: the bare layer on a whole graph, GCN normalisation, errors.

The exactness on real partitions (several processes) is proved in
tests/distributed/test_pyg_layers.py.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch_geometric.nn import (
    EdgeConv,
    GATConv,
    GCNConv,
    GINConv,
    GraphConv,
    SAGEConv,
    SGConv,
)

from partgnn.distributed.context import DistContext
from partgnn.distributed.exchange_plan import ExchangePlan
from partgnn.distributed.halo_exchange import HaloExchanger
from partgnn.models.partitioned_layer import PartitionedLayer, gcn_partition_norm

N_NODES = 12
F_IN = 3


def _graph(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A small random directed graph with a self-loop, a duplicate edge and an isolated node."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(N_NODES, F_IN, generator=generator, dtype=torch.float64)
    edge_index = torch.randint(0, N_NODES - 1, (2, 30), generator=generator)
    edge_index = torch.cat([edge_index, torch.tensor([[2, 5], [2, 6]]), edge_index[:, :1]], dim=1)
    edge_weight = torch.rand(edge_index.shape[1], generator=generator, dtype=torch.float64) + 0.5
    return x, edge_index, edge_weight


def _layers() -> dict[str, nn.Module]:
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(2 * F_IN, 4), nn.Tanh(), nn.Linear(4, 4))
    layers = {
        "gcn": GCNConv(F_IN, 4),
        "graph": GraphConv(F_IN, 4),
        "sage": SAGEConv(F_IN, 4),
        "gat": GATConv(F_IN, 2, heads=2),
        "edge": EdgeConv(mlp),
        "gin": GINConv(nn.Sequential(nn.Linear(F_IN, 4), nn.ReLU(), nn.Linear(4, 4))),
    }
    return {name: layer.double() for name, layer in layers.items()}


def _single_rank_exchanger(n_nodes: int) -> HaloExchanger:
    """The P = 1 exchange (identity, no process group needed)."""
    context = DistContext.one_process("cpu")
    return HaloExchanger(ExchangePlan.single(n_nodes), context)


@pytest.mark.parametrize("name", ["gcn", "graph", "sage", "gat", "edge", "gin"])
def test_whole_graph_equals_bare_layer(name):
    x, edge_index, _ = _graph()
    layer = _layers()[name]
    wrapped = PartitionedLayer(layer)
    expected = layer(x, edge_index)
    assert torch.equal(wrapped(x, edge_index), expected)
    assert torch.equal(wrapped(x, edge_index, None), expected)
    # The P = 1 exchange runs the partition code path (GCN: its own normalisation).
    out = wrapped(x, edge_index, _single_rank_exchanger(N_NODES))
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("improved", [False, True])
@pytest.mark.parametrize("add_self_loops", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_gcn_normalisation_matches_pyg(improved, add_self_loops, weighted):
    x, edge_index, edge_weight = _graph(seed=1)
    kwargs = {"edge_weight": edge_weight} if weighted else {}
    torch.manual_seed(0)
    layer = GCNConv(F_IN, 4, improved=improved, add_self_loops=add_self_loops).double()
    expected = layer(x, edge_index, **kwargs)
    out = PartitionedLayer(layer)(x, edge_index, _single_rank_exchanger(N_NODES), **kwargs)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    assert layer.normalize, "the normalize flag must be restored"


def test_gcn_edge_weight_gradient_matches_pyg():
    x, edge_index, edge_weight = _graph(seed=2)
    torch.manual_seed(0)
    layer = GCNConv(F_IN, 4).double()
    grads = []
    for exchange in (None, _single_rank_exchanger(N_NODES)):
        weight = edge_weight.clone().requires_grad_()
        if exchange is None:
            out = layer(x, edge_index, weight)
        else:
            out = PartitionedLayer(layer)(x, edge_index, exchange, edge_weight=weight)
        out.sin().sum().backward()
        grads.append(weight.grad)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-12, atol=1e-12)


def test_gcn_norm_uses_exchanged_halo_degrees():
    # Rank view: owned nodes 0, 1; halo node 2 whose true degree (5, self-loop included) is only
    # known to its owner. Edges 2 -> 0, 2 -> 1, 0 -> 1.
    edge_index = torch.tensor([[2, 2, 0], [0, 1, 1]])

    def exchange(degree_owned: torch.Tensor) -> torch.Tensor:
        return torch.cat([degree_owned, torch.tensor([[5.0]], dtype=degree_owned.dtype)])

    edges, weights = gcn_partition_norm(
        edge_index, None, n_owned=2, n_local=3, exchange=exchange, dtype=torch.float64
    )
    by_edge = {tuple(e): w for e, w in zip(edges.t().tolist(), weights.tolist(), strict=True)}
    degree = {0: 2.0, 1: 3.0, 2: 5.0}
    for (j, i), weight in by_edge.items():
        assert weight == pytest.approx(1.0 / (degree[j] * degree[i]) ** 0.5)
    assert set(by_edge) == {(2, 0), (2, 1), (0, 1), (0, 0), (1, 1), (2, 2)}


def test_gcn_cached_is_refused_on_a_partition():
    x, edge_index, _ = _graph()
    wrapped = PartitionedLayer(GCNConv(F_IN, 4, cached=True).double())
    wrapped(x, edge_index)  # a whole graph: PyG's own caching
    with pytest.raises(ValueError, match="cached=True"):
        wrapped(x, edge_index, _single_rank_exchanger(N_NODES))


def test_rejects_what_is_not_a_message_passing_layer():
    with pytest.raises(TypeError, match=r"MessagePassing layer \(got Linear\)"):
        PartitionedLayer(nn.Linear(3, 4))


def test_rejects_inexact_layers():
    with pytest.raises(ValueError, match="SGConv is not exact"):
        PartitionedLayer(SGConv(F_IN, 4, K=2))
    with pytest.raises(ValueError, match="target_to_source"):
        PartitionedLayer(GraphConv(F_IN, 4, flow="target_to_source"))


def test_rejects_rows_that_are_not_the_owned_nodes():
    x, edge_index, _ = _graph()
    wrapped = PartitionedLayer(GraphConv(F_IN, 4).double())
    with pytest.raises(ValueError, match="x_owned has 11 rows, the rank owns 12 nodes"):
        wrapped(x[:-1], edge_index, _single_rank_exchanger(N_NODES))


def test_rejects_malformed_edges():
    x, edge_index, edge_weight = _graph()
    wrapped = PartitionedLayer(GraphConv(F_IN, 4).double())
    with pytest.raises(ValueError, match=r"shape \(2, E_local\) \(got \(3, 33\)\)"):
        wrapped(x, torch.cat([edge_index, edge_index[:1]]))
    with pytest.raises(ValueError, match="edge_weight has 32 rows, edge_index has 33 edges"):
        wrapped(x, edge_index, edge_weight=edge_weight[:-1])


def test_rejects_tuple_outputs():
    x, edge_index, _ = _graph()
    wrapped = PartitionedLayer(GATConv(F_IN, 2).double())
    with pytest.raises(TypeError, match="return_attention_weights"):
        wrapped(x, edge_index, return_attention_weights=True)
