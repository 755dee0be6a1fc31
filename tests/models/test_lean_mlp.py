"""The lean edge MLPs equal the plain MLP of the concatenation, and keep what they claim."""

from __future__ import annotations

import pytest
import torch

from partgnn.models import chunk_gradients, chunk_size
from partgnn.models.chunked_edge_mlp import EdgeNodes, edge_mlp
from partgnn.models.compute_policy import ComputePolicy
from partgnn.models.lean_mlp import first_layer, in_autocast_dtype, mlp_tail
from partgnn.models.mlp import make_mlp

#: Activation recomputation on (the chunked edge MLP).
RECOMPUTE = ComputePolicy(recompute=True)

N_NODES, N_EDGES, H, R = 40, 700, 8, 5


@pytest.fixture
def graph():
    generator = torch.Generator().manual_seed(3)
    h = torch.randn(N_NODES, H, generator=generator, dtype=torch.float64)
    rows = torch.randn(N_EDGES, R, generator=generator, dtype=torch.float64)
    src = torch.randint(0, N_NODES, (N_EDGES,), generator=generator)
    dst = torch.randint(0, N_NODES, (N_EDGES,), generator=generator)
    return h, rows, src, dst


@pytest.fixture
def small_chunks(monkeypatch):
    """Several chunks on a small graph (forward and backward loop over them)."""
    monkeypatch.setattr(chunk_size, "MIN_CHUNK_EDGES", 64)


def _mlps(in_features: int, out_features: int = H, *, output_activation: bool = True):
    torch.manual_seed(0)
    return make_mlp(
        in_features,
        H,
        out_features,
        activation="silu",
        output_activation=output_activation,
    ).double()


def _gradients(output, tensors):
    output.pow(2).sum().backward()
    grads = [t.grad.clone() if t.grad is not None else None for t in tensors]
    for t in tensors:
        t.grad = None
    return grads


def test_first_layer_is_the_linear_layer_of_the_concatenation():
    torch.manual_seed(0)
    linear = torch.nn.Linear(3 + 4 + 2, 6).double()
    blocks = [torch.randn(10, w, dtype=torch.float64) for w in (3, 4, 2)]
    expected = linear(torch.cat(blocks, dim=-1))
    torch.testing.assert_close(first_layer(linear, blocks), expected, rtol=1e-14, atol=1e-14)


def test_mlp_tail_with_recomputed_elementwise_work_equals_the_mlp():
    mlp = _mlps(R)
    x = torch.randn(30, R, dtype=torch.float64, requires_grad=True)
    expected = mlp(x)
    expected_grads = _gradients(expected, [x, *mlp.parameters()])
    out = mlp_tail(mlp, mlp[0](x), recompute_elementwise=True)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    for got, want in zip(_gradients(out, [x, *mlp.parameters()]), expected_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("recompute", [False, True])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("with_encoder", [False, True])
def test_edge_mlp_equals_the_mlp_of_the_concatenation(
    graph, small_chunks, recompute, residual, with_encoder
):
    h, rows, src, dst = graph
    encoder = _mlps(R) if with_encoder else None
    width = H if with_encoder else R
    if residual and width != H:
        pytest.skip("a residual needs rows of the output width")
    mlp = _mlps(2 * H + width)
    h = h.clone().requires_grad_()
    rows = rows.clone().requires_grad_()
    parameters = [*mlp.parameters(), *(encoder.parameters() if encoder else [])]
    tensors = [h, rows, *parameters]

    encoded = encoder(rows) if encoder else rows
    expected = mlp(torch.cat([h[src], h[dst], encoded], dim=-1))
    if residual:
        expected = expected + encoded
    expected_grads = _gradients(expected, tensors)

    out = edge_mlp(
        mlp, rows, EdgeNodes(h, src, dst), residual=residual, row_encoder=encoder,
        compute=ComputePolicy(recompute=recompute),
    )  # fmt: skip
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    for got, want in zip(_gradients(out, tensors), expected_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-11, atol=1e-11)


def test_edge_mlp_of_rows_alone_and_frozen_inputs(graph, small_chunks):
    """No node part (an encoder), inputs that need no gradient, a frozen layer."""
    _, rows, _, _ = graph
    mlp = _mlps(R)
    mlp[0].weight.requires_grad_(False)
    expected = mlp(rows)
    expected_grads = _gradients(expected, list(mlp.parameters())[1:])
    out = edge_mlp(mlp, rows, compute=RECOMPUTE)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    grads = _gradients(out, list(mlp.parameters())[1:])
    for got, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-11, atol=1e-11)
    assert mlp[0].weight.grad is None


def test_edge_mlp_without_grad_is_the_same_function(graph):
    h, rows, src, dst = graph
    mlp = _mlps(2 * H + R, output_activation=False)
    with torch.no_grad():
        plain = edge_mlp(mlp, rows, EdgeNodes(h, src, dst))
        recomputed = edge_mlp(mlp, rows, EdgeNodes(h, src, dst), compute=RECOMPUTE)
    expected = mlp(torch.cat([h[src], h[dst], rows], dim=-1))
    torch.testing.assert_close(plain, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(recomputed, expected, rtol=1e-12, atol=1e-12)


def _saved_edge_rows(fn) -> list[torch.Size]:
    """Shapes of the tensors with one row per edge that autograd keeps for the backward pass
    (what ``fn`` itself saves; the checkpointed element-wise runs save their one input), each
    memory block once."""
    shapes, storages = [], set()

    def pack(tensor):
        if tensor.dim() == 2 and tensor.shape[0] == N_EDGES and tensor.is_floating_point():
            storage = tensor.untyped_storage().data_ptr()
            if storage not in storages:  # saved twice is kept once
                storages.add(storage)
                shapes.append(tensor.shape)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        fn()
    return shapes


def test_bytes_kept_per_edge(graph):
    """Plain MLP of the concatenation: 3H + 5 x H per edge, and each LayerNorm's mean and
    1/std. Lean: 4 x H. Recomputed: the rows only (the input, held by the model anyway)."""
    h, _, src, dst = graph
    h = h.clone().requires_grad_()
    rows_h = torch.randn(N_EDGES, H, dtype=torch.float64, requires_grad=True)
    mlp = _mlps(3 * H)
    plain = _saved_edge_rows(lambda: mlp(torch.cat([h[src], h[dst], rows_h], dim=-1)))
    lean = _saved_edge_rows(lambda: edge_mlp(mlp, rows_h, EdgeNodes(h, src, dst)))
    recomputed = _saved_edge_rows(
        lambda: edge_mlp(mlp, rows_h, EdgeNodes(h, src, dst), compute=RECOMPUTE)
    )
    floats = [sum(shape[1] for shape in shapes) for shapes in (plain, lean, recomputed)]
    # lean: the rows (for the W_r gradient), then z1, the 2nd Linear's input and z2.
    assert floats == [3 * H + 5 * H + 2 * 2, H + 3 * H, H]


def test_recomputed_edge_mlp_under_bf16_autocast(graph, small_chunks):
    """The backward pass recomputes under the forward's autocast, as the forward ran."""
    h, rows, src, dst = (t.float() if t.is_floating_point() else t for t in graph)
    mlp = _mlps(2 * H + R).float()
    outputs = []
    for recompute in (False, True):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = edge_mlp(
                mlp, rows, EdgeNodes(h, src, dst), compute=ComputePolicy(recompute=recompute)
            )
        outputs.append((out, _gradients(out.float(), list(mlp.parameters()))))
    (plain, plain_grads), (recomputed, grads) = outputs
    assert recomputed.dtype == plain.dtype == torch.bfloat16
    torch.testing.assert_close(recomputed, plain, rtol=0, atol=0)
    # Both are bf16 sums over 700 edges (at once vs per chunk), each some % off the exact
    # gradient, by amounts that vary with the thread count (7-11 % apart on one thread): the
    # recomputed path must be as close to the float64 gradient as the plain one.
    exact = _gradients(
        edge_mlp(mlp.double(), rows.double(), EdgeNodes(h.double(), src, dst)),
        list(mlp.parameters()),
    )
    for got, plain_got, want in zip(grads, plain_grads, exact, strict=True):
        error = float((got.double() - want).norm() / want.norm())
        plain_error = float((plain_got.double() - want).norm() / want.norm())
        assert error < max(2 * plain_error, 2e-2), (error, plain_error)


def _star_gradient(recompute_dtype: torch.dtype | None) -> torch.Tensor:
    """The gradient of the node latents of a star (4096 edges into node 0), from a recomputed
    edge MLP under bf16 autocast (``recompute_dtype``), or in float64 without (``None``)."""
    generator = torch.Generator().manual_seed(3)
    edges = 4096
    h = torch.randn(2, H, generator=generator, dtype=torch.float64)
    rows = torch.randn(edges, R, generator=generator, dtype=torch.float64)
    src, dst = torch.ones(edges, dtype=torch.long), torch.zeros(edges, dtype=torch.long)
    torch.manual_seed(0)
    mlp = _mlps(2 * H + R)
    if recompute_dtype is not None:
        h, rows, mlp = h.float(), rows.float(), mlp.float()
    h.requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=recompute_dtype is not None):
        out = edge_mlp(mlp, rows, EdgeNodes(h, src, dst), compute=RECOMPUTE)
    out.float().sum().backward()
    return h.grad.double()


def test_a_high_degree_nodes_gradient_is_summed_in_float32_under_bf16(small_chunks):
    exact = _star_gradient(None)
    got = _star_gradient(torch.bfloat16)
    # bf16 terms, summed in float32 (0.0059 here; 0.0066 summed in bf16 on this CPU, whose
    # index_add_ rounds less than GPU atomics do).
    assert float((got - exact).norm() / exact.norm()) < 1e-2
    assert chunk_gradients.accumulation_dtype(torch.bfloat16) == torch.float32
    assert chunk_gradients.accumulation_dtype(torch.float64) == torch.float64


def test_layer_norm_outputs_follow_autocast_as_on_gpus():
    mlp = _mlps(R).float()
    rows = torch.randn(16, R)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert mlp_tail(mlp, mlp[0](rows)).dtype == torch.bfloat16
    assert mlp_tail(mlp, mlp[0](rows)).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert in_autocast_dtype(torch.ones(2)).dtype == torch.bfloat16
        assert in_autocast_dtype(torch.ones(2, dtype=torch.long)).dtype == torch.long
    assert in_autocast_dtype(torch.ones(2)).dtype == torch.float32
