"""The chunked edge MLP with an exchange: the same values and gradients as the plain MLP on
``[owned; halo]`` rows, and the order that hides the exchange (interior edges while the rows are in
flight).

The exchange here is one process's loop-back: its halo rows are copies of some of its own
owned rows (``h[send_index]``), which is what a real exchange computes across ranks; the
multi-process proof is tests/distributed/test_exactness.py.
"""

from __future__ import annotations

import pytest
import torch

from partgnn.memory.heap_release import ALWAYS_RELEASE_HEAP, DEFAULT_HEAP_RELEASE
from partgnn.models import chunk_size, chunked_edge_mlp, edge_chunks
from partgnn.models.chunked_edge_mlp import EdgeNodes, edge_mlp
from partgnn.models.compute_policy import ComputePolicy
from partgnn.models.mlp import make_mlp

#: Activation recomputation on (the chunked edge MLP).
RECOMPUTE = ComputePolicy(recompute=True)

H = 8


class _Pending:
    def __init__(self, rows: torch.Tensor, log: list[str], name: str) -> None:
        self.rows, self.log, self.name = rows, log, name

    def wait(self) -> torch.Tensor:
        self.log.append(self.name)
        return self.rows


class LoopbackExchange:
    """Halo rows ``h[send_index]``: every halo node is a copy of an owned node."""

    def __init__(self, send_index: torch.Tensor, n_owned: int) -> None:
        self.send_index, self.n_owned, self.n_halo = send_index, n_owned, len(send_index)
        self.log: list[str] = []

    def start(self, x_owned: torch.Tensor) -> _Pending:
        self.log.append("start")
        return _Pending(x_owned.detach()[self.send_index].clone(), self.log, "wait")

    def start_reverse(self, grad_halo: torch.Tensor) -> _Pending:
        self.log.append("start_reverse")
        return _Pending(grad_halo.clone(), self.log, "wait_reverse")


def _graph(n_owned=50, n_halo=12, n_edges=700, seed=0):
    """Owned nodes ``[0, n_owned)``, halo ``[n_owned, n_owned + n_halo)``; edges interior
    first (both ends owned), then boundary ones (at least one halo end)."""
    generator = torch.Generator().manual_seed(seed)
    n_interior = n_edges * 2 // 3
    interior = torch.randint(0, n_owned, (2, n_interior), generator=generator)
    boundary = torch.randint(0, n_owned + n_halo, (2, n_edges - n_interior), generator=generator)
    boundary[1, ::2] = torch.randint(n_owned, n_owned + n_halo, boundary[1, ::2].shape,
                                     generator=generator)  # fmt: skip
    boundary[0, 1::2] = torch.randint(n_owned, n_owned + n_halo, boundary[0, 1::2].shape,
                                      generator=generator)  # fmt: skip
    edge_index = torch.cat([interior, boundary], dim=1)
    send_index = torch.randperm(n_owned, generator=generator)[:n_halo]
    h = torch.randn(n_owned, H, generator=generator, dtype=torch.float64)
    return edge_index, n_interior, send_index, h


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(chunk_size, "MIN_CHUNK_EDGES", 32)


@pytest.mark.parametrize("recompute", [False, True])
@pytest.mark.parametrize("encoder", [False, True])
def test_exchange_inside_equals_plain_mlp_on_local_rows(small_chunks, recompute, encoder):
    torch.manual_seed(0)
    edge_index, n_interior, send_index, h0 = _graph()
    width = 5 if encoder else H
    mlp = make_mlp(2 * H + H, H, H, activation="silu").double()
    row_encoder = make_mlp(width, H, H).double() if encoder else None
    rows0 = torch.randn(edge_index.shape[1], width, dtype=torch.float64)
    src, dst = edge_index
    results = []
    for inside in (False, True):
        h = h0.clone().requires_grad_()
        rows = rows0.clone().requires_grad_()
        modules = [mlp, *([row_encoder] if encoder else [])]
        for module in modules:
            module.zero_grad()
        exchange = LoopbackExchange(send_index, h.shape[0])
        options = {"residual": True, "row_encoder": row_encoder}
        if inside:
            nodes = EdgeNodes(h, src, dst, exchange=exchange, n_interior=n_interior)
            out = edge_mlp(mlp, rows, nodes, compute=ComputePolicy(recompute=recompute),
                           **options)  # fmt: skip
        else:
            h_local = torch.cat([h, h[send_index]])
            out = edge_mlp(mlp, rows, EdgeNodes(h_local, src, dst), **options)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        grads = [p.grad.clone() for module in modules for p in module.parameters()]
        results.append((out.detach(), h.grad, rows.grad, grads))
    (out_a, h_a, rows_a, grads_a), (out_b, h_b, rows_b, grads_b) = results
    torch.testing.assert_close(out_b, out_a, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(h_b, h_a, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(rows_b, rows_a, rtol=1e-12, atol=1e-12)
    for grad_b, grad_a in zip(grads_b, grads_a, strict=True):
        torch.testing.assert_close(grad_b, grad_a, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("recompute", [False, True])
def test_interior_edges_run_while_the_rows_are_in_flight(small_chunks, monkeypatch, recompute):
    edge_index, n_interior, send_index, h0 = _graph()
    exchange = LoopbackExchange(send_index, h0.shape[0])
    compute = chunked_edge_mlp.compute_piece

    def logged(*args, **kwargs):
        start, end = args[5], args[6]
        exchange.log.append("interior" if end <= n_interior else "boundary")
        assert start >= n_interior or end <= n_interior, "a chunk mixes interior and boundary"
        return compute(*args, **kwargs)

    monkeypatch.setattr(chunked_edge_mlp, "compute_piece", logged)
    mlp = make_mlp(3 * H, H, H).double()
    h = h0.clone().requires_grad_()
    rows = torch.randn(edge_index.shape[1], H, dtype=torch.float64)
    nodes = EdgeNodes(h, edge_index[0], edge_index[1], exchange=exchange, n_interior=n_interior)
    out = edge_mlp(mlp, rows, nodes, compute=ComputePolicy(recompute=recompute))
    forward = _runs(exchange.log)
    assert forward == ["start", "interior", "wait", "boundary"]
    exchange.log.clear()
    out.sum().backward()
    backward = _runs(exchange.log)
    if recompute:  # the backward pass recomputes the chunks it differentiates
        assert backward == ["boundary", "start_reverse", "interior", "wait_reverse"]
    else:
        assert backward == ["start_reverse", "wait_reverse"]


def test_an_exchange_needs_owned_latents_and_the_interior_count():
    mlp = make_mlp(3 * H, H, H)
    exchange = LoopbackExchange(torch.zeros(0, dtype=torch.long), 4)
    with pytest.raises(ValueError, match="n_interior"):
        none = torch.zeros(3, dtype=torch.long)
        edge_mlp(mlp, torch.zeros(3, H), EdgeNodes(torch.zeros(4, H), none, none,
                                                   exchange=exchange))  # fmt: skip


def _runs(log: list[str]) -> list[str]:
    """The log with repeats collapsed: ``[a, a, b] -> [a, b]``."""
    return [entry for index, entry in enumerate(log) if index == 0 or log[index - 1] != entry]


@pytest.mark.parametrize(
    ("policy", "releases"), [(DEFAULT_HEAP_RELEASE, False), (ALWAYS_RELEASE_HEAP, True)]
)
def test_a_recomputed_edge_mlp_releases_its_heap_as_its_policy_says(monkeypatch, policy, releases):
    released = []
    monkeypatch.setattr(chunked_edge_mlp, "release_free_heap", released.append)
    edge_index, _, send_index, h = _graph()
    h = torch.cat([h, h[send_index]])  # owned and halo rows
    mlp = make_mlp(3 * H, H, H).double()
    rows = torch.randn(edge_index.shape[1], H, dtype=torch.float64, requires_grad=True)
    out = edge_mlp(mlp, rows, EdgeNodes(h, edge_index[0], edge_index[1]),
                   compute=ComputePolicy(recompute=True, heap_release=policy))  # fmt: skip
    out.sum().backward()
    # A 700-edge graph is far below event size: only a policy releasing after every MLP does,
    # once in the forward pass and once in the backward pass.
    assert released == ([torch.device("cpu")] * 2 if releases else [])


def test_chunks_are_sized_from_the_memory_a_chunk_may_take(monkeypatch):
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    per_edge = chunk_size.CHUNK_VALUES_PER_EDGE * 64 * 4  # width 64, float32
    # Without a setting on a CPU: 16 chunks per event, of >= MIN_CHUNK_EDGES edges.
    for edges, expected in ((1_000_000, 16), (100_000, 16), (20_000, 5), (3_000, 1)):
        size = chunk_size.chunk_edges(edges, 64, 4, None, cpu)
        assert len(edge_chunks.chunk_ranges(0, edges, size)) == expected
    # A chunk memory: the largest chunk that fits, on any device; one when the MLP fits.
    for device in (cpu, cuda):
        assert chunk_size.chunk_edges(1_000_000, 64, 4, 1_000_000 * per_edge, device) == 1_000_000
        size = chunk_size.chunk_edges(1_000_000, 64, 4, 250_000 * per_edge + 1, device)
        assert len(edge_chunks.chunk_ranges(0, 1_000_000, size)) == 4
        assert chunk_size.chunk_edges(10, 64, 4, 1, device) == 1  # never an empty chunk
    # Without a setting on a GPU: a quarter of its memory (80 GB: one chunk at 1e6 edges).
    monkeypatch.setattr(chunk_size, "device_memory", lambda device: 80 * 10**9)
    assert chunk_size.chunk_edges(1_000_000, 128, 4, None, cuda) >= 1_000_000
    monkeypatch.setattr(chunk_size, "device_memory", lambda device: 2 * 10**9)
    size = chunk_size.chunk_edges(1_000_000, 128, 4, None, cuda)
    assert size == int(chunk_size.GPU_CHUNK_SHARE * 2e9) // (12 * 128 * 4)


def test_one_chunk_per_mlp_computes_what_many_do():
    edge_index, _, send_index, h0 = _graph()
    h0 = torch.cat([h0, h0[send_index]])  # owned and halo rows
    src, dst = edge_index
    mlp = make_mlp(3 * H, H, H).double()
    rows0 = torch.randn(edge_index.shape[1], H, dtype=torch.float64)
    results = []
    for chunk_bytes in (None, 10**9, 64 * 12 * H * 8):  # 11 chunks, one, 11 of 64 edges
        h = h0.clone().requires_grad_()
        rows = rows0.clone().requires_grad_()
        compute = ComputePolicy(recompute=True, chunk_bytes=chunk_bytes)
        out = edge_mlp(mlp, rows, EdgeNodes(h, src, dst), residual=True, compute=compute)
        out.square().sum().backward()
        results.append((out.detach(), h.grad, rows.grad, mlp[0].weight.grad.clone()))
        mlp.zero_grad()
    for other in results[1:]:
        for a, b in zip(results[0], other, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_the_backward_recomputation_runs_each_chunks_layer_norms_once(monkeypatch):
    """A chunk recomputed in the backward pass is back-propagated at once: its element-wise
    outputs are kept for that (a chunk's worth), not recomputed a second time (issue 26)."""
    monkeypatch.setattr(chunk_size, "MIN_CHUNK_EDGES", 64)
    edge_index = _graph()[0]
    src, dst = edge_index
    rows = torch.randn(edge_index.shape[1], H, dtype=torch.float64)
    h = torch.randn(int(edge_index.max()) + 1, H, dtype=torch.float64, requires_grad=True)
    mlp = make_mlp(3 * H, H, H).double()  # two LayerNorms
    calls = []
    layer_norm = torch.nn.LayerNorm.forward
    monkeypatch.setattr(torch.nn.LayerNorm, "forward",
                        lambda self, x: calls.append(1) or layer_norm(self, x))  # fmt: skip
    out = edge_mlp(mlp, rows, EdgeNodes(h, src, dst), compute=RECOMPUTE)
    size = chunk_size.chunk_edges(rows.shape[0], H, 8, None, rows.device)
    chunks = len(edge_chunks.chunk_ranges(0, rows.shape[0], size))
    assert chunks > 1
    assert len(calls) == 2 * chunks  # the forward pass
    calls.clear()
    out.sum().backward()
    assert len(calls) == 2 * chunks  # once per chunk and LayerNorm (was twice)
