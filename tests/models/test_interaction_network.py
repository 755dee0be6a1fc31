"""The lean Interaction Network computes the textbook model, and keeps few bytes per edge.

The reference below is the model written plainly (concatenations, PyG scatter, autograd keeping
everything); the lean forward (projected first layers, recomputed element-wise work, edge MLPs
recomputed in chunks with checkpointing) must give the same logits and gradients.
"""

from __future__ import annotations

import pytest
import torch
from torch_geometric.utils import scatter

from partgnn.memory.meters import HeapMeter, heap_meter_available
from partgnn.models import chunk_size
from partgnn.models.compute_policy import ComputePolicy
from partgnn.models.interaction_network import AGGREGATIONS, InteractionNetwork


def _graph(n_nodes: int, n_edges: int, dtype=torch.float64, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n_nodes, 3, generator=generator, dtype=dtype)
    edge_index = torch.randint(0, n_nodes, (2, n_edges), generator=generator)
    edge_attr = torch.randn(n_edges, 4, generator=generator, dtype=dtype)
    return x, edge_index, edge_attr


def _reference_forward(model: InteractionNetwork, x, edge_index, edge_attr) -> torch.Tensor:
    x, edge_attr = model.input_scaler(x, edge_attr)
    h = h0 = model.node_encoder(x)
    e = e0 = model.edge_encoder(edge_attr)
    src, dst = edge_index
    n = x.shape[0]
    concat = model.architecture.concat_initial

    def reduce(index):
        if model.aggregation == "sum_max":
            return torch.cat([scatter(e, index, 0, dim_size=n, reduce=r) for r in ("sum", "max")],
                             dim=-1)  # fmt: skip
        return scatter(e, index, 0, dim_size=n, reduce=model.aggregation)

    for step in range(model.steps):
        index = 0 if len(model.edge_mlps) == 1 else step
        if concat:
            nodes = torch.cat([h, h0], dim=-1)
            edge_inputs = [nodes[src], nodes[dst], e, e0]
        else:
            edge_inputs = [h[src], h[dst], e]
        update = model.edge_mlps[index](torch.cat(edge_inputs, dim=-1))
        e = e + update if model.residual else update
        node_inputs = [h, reduce(dst), reduce(src)] + ([h0] if concat else [])
        update = model.node_mlps[index](torch.cat(node_inputs, dim=-1))
        h = h + update if model.residual else update
    return model.edge_head(torch.cat([h[src], h[dst], e], dim=-1)).squeeze(-1)


def _logits_and_grads(model, forward, graph):
    model.zero_grad(set_to_none=True)
    logits = forward(*graph)
    (logits.sin() * 3).sum().backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def _assert_equals_the_plain_model(
    model: InteractionNetwork, graph, *, grad_rtol: float = 1e-10, grad_atol: float = 1e-11
) -> None:
    """The model's logits (recording gradients and not) and gradients equal the textbook
    forward's (float64)."""
    expected, expected_grads = _logits_and_grads(
        model, lambda *g: _reference_forward(model, *g), graph
    )
    logits, grads = _logits_and_grads(model, model, graph)
    torch.testing.assert_close(logits, expected, rtol=1e-12, atol=1e-12)
    assert grads.keys() == expected_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(
            grad, expected_grads[name], rtol=grad_rtol, atol=grad_atol, msg=name
        )
    with torch.no_grad():
        torch.testing.assert_close(model(*graph), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("checkpoint", [False, True])
@pytest.mark.parametrize("variant", ["default", "per-step weights, no residual"])
def test_lean_model_equals_the_plain_model(monkeypatch, aggregation, checkpoint, variant):
    monkeypatch.setattr(chunk_size, "MIN_CHUNK_EDGES", 128)  # several chunks of edges
    graph = _graph(60, 900)
    torch.manual_seed(7)
    model = InteractionNetwork(
        node_features=3,
        edge_features=4,
        hidden=8,
        steps=3,
        activation="silu",
        aggregation=aggregation,
        shared_weights=variant == "default",
        residual=variant == "default",
        compute=ComputePolicy(recompute=checkpoint),
    ).double()
    _assert_equals_the_plain_model(model, graph)


#: One chunk per edge MLP (as on a GPU of any size at this graph's).
ONE_CHUNK = ComputePolicy(recompute=True, chunk_bytes=10**9)


@pytest.mark.parametrize("aggregation", ["sum", "sum_max"])
@pytest.mark.parametrize("steps", [3, 4])
@pytest.mark.parametrize("variant", ["default", "per-step weights, no residual"])
def test_one_chunk_per_mlp_with_recomputation_equals_the_plain_model(aggregation, steps, variant):
    """With one chunk per edge MLP a region's recomputation keeps its edge MLPs' graphs for
    the backward pass, and the edge head keeps its own: the same logits and gradients."""
    graph = _graph(60, 900)
    torch.manual_seed(7)
    model = InteractionNetwork(
        node_features=3, edge_features=4, hidden=8, steps=steps, activation="silu",
        aggregation=aggregation, shared_weights=variant == "default",
        residual=variant == "default", compute=ONE_CHUNK,
    ).double()  # fmt: skip
    _assert_equals_the_plain_model(model, graph)


@pytest.mark.parametrize("compute", [ONE_CHUNK, ComputePolicy(recompute=True)])
def test_recomputation_evaluates_each_edge_mlp_twice_with_one_chunk(monkeypatch, compute):
    """Issue 49: a training step evaluates the last edge MLP of each recomputed region (2 steps)
    in the forward pass and once more in the region's recomputation, not a third time in its
    backward pass (the others are recomputed there: their graphs would be held through the
    later steps' backward passes); the edge head once. In chunks (a CPU's default), the backward
    pass recomputes them all."""
    monkeypatch.setattr(chunk_size, "MIN_CHUNK_EDGES", 128)  # 900 edges: 8 chunks by default
    graph = _graph(60, 900)
    steps = 4
    model = InteractionNetwork(node_features=3, edge_features=4, hidden=8, steps=steps,
                               shared_weights=True, compute=compute).double()  # fmt: skip
    rows = {"edge": 0, "node": 0, "head": 0}

    def counting(kind):
        def hook(module, inputs, output):
            rows[kind] += inputs[0].shape[0]

        return hook

    model.edge_mlps[0][1].register_forward_hook(counting("edge"))  # its first LayerNorm
    model.node_mlps[0][1].register_forward_hook(counting("node"))
    model.edge_head[1].register_forward_hook(counting("head"))
    model(*graph).sum().backward()
    if compute is ONE_CHUNK:
        regions = steps // 2
        assert rows == {"edge": (3 * steps - regions) * 900, "node": 2 * steps * 60, "head": 900}
    else:
        assert rows == {"edge": 3 * steps * 900, "node": 2 * steps * 60, "head": 2 * 900}


@pytest.mark.parametrize("checkpoint", [False, True])
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("residual", [False, True])
def test_reference_style_model_equals_the_plain_model(checkpoint, fused, residual):
    """The reference pipeline's architecture (BatchNorm of the whole graph's rows, initial
    encodings concatenated, 3-layer MLPs, ReLU): the model's unchunked computation, with its
    regions of steps recomputed or not, equals the textbook forward with torch's own BatchNorm
    statistics."""
    graph = _graph(60, 900)
    torch.manual_seed(7)
    model = InteractionNetwork(
        node_features=3, edge_features=4, hidden=8, steps=3, mlp_layers=3, layer_norm=False,
        batch_norm=True, concat_initial=True, residual=residual,
        compute=ComputePolicy(recompute=checkpoint, fused=fused),
    ).double()  # fmt: skip
    _assert_equals_the_plain_model(model, graph, grad_rtol=1e-9, grad_atol=1e-10)


def test_batch_norm_and_layer_norm_are_refused_together():
    with pytest.raises(ValueError, match="batch_norm needs layer_norm: false"):
        InteractionNetwork(node_features=3, edge_features=4, batch_norm=True)


def _heap(checkpoint: bool, graph, steps: int, hidden: int) -> tuple[float, float]:
    """(bytes kept after the forward per edge per step, peak bytes of forward + backward)."""
    torch.manual_seed(0)
    model = InteractionNetwork(
        node_features=3, edge_features=4, hidden=hidden, steps=steps, activation="silu",
        shared_weights=True, compute=ComputePolicy(recompute=checkpoint),
    )  # fmt: skip
    # The first pass warms lazy buffers and the C heap; of the next ones the least is kept (the
    # heap counts every thread's allocations: one left running by an earlier test adds noise).
    kept, peak = [], []
    for _ in range(3):
        model.zero_grad(set_to_none=True)
        with HeapMeter() as meter:
            loss = model(*graph).sum()
            kept.append(meter.now())
            loss.backward()
        peak.append(meter.peak)
    n_edges = graph[1].shape[1]
    return min(kept[1:]) / (n_edges * steps), min(peak[1:])


@pytest.mark.heap_meter
@pytest.mark.skipif(not heap_meter_available(), reason="needs glibc's mallinfo2")
def test_bytes_kept_per_edge_and_peak_memory(monkeypatch):
    """Per edge per step, in rows of H: with checkpointing 0.5 (the edge latents of every
    second step; node rows add ~0.1 at 10 edges per node); recomputing element-wise work
    only, 4 (z1, the 2nd Linear's input, z2, the latents) plus the encoder's and the head's
    share (~0.6 at 8 steps) and node rows. Checkpointing's peak is below 0.25 of the other's
    at 8 steps (16 chunks of edges, as on an event graph)."""
    monkeypatch.setattr(chunk_size, "MIN_CHUNK_EDGES", 1250)
    hidden, steps = 32, 8
    graph = _graph(2_000, 20_000, dtype=torch.float32)
    row = hidden * 4
    kept_on, peak_on = _heap(True, graph, steps, hidden)
    kept_off, peak_off = _heap(False, graph, steps, hidden)
    assert kept_on <= 0.7 * row, kept_on / row
    assert kept_off <= 5.6 * row, kept_off / row
    assert peak_on <= 0.25 * peak_off, peak_on / peak_off
