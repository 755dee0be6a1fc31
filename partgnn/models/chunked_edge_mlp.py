"""Edge MLPs run over chunks of edges: recomputed in the backward pass, and overlapped with the
halo exchange.

:func:`edge_mlp` is the one entry point. Plain, it is autograd on an
:class:`~partgnn.models.lean_mlp.EdgeMLP`. Two options make it a custom autograd function that
walks the edges part by part, forward and backward:

- **recompute** (activation recomputation at the granularity of one MLP): nothing is kept for
  the backward pass but the inputs, which the model holds anyway; the backward pass recomputes
  one chunk at a time, so at most one chunk's activations exist at once. The halo exchange is
  not part of the recomputation and is never repeated.
- **exchange** (communication hidden behind compute): the node latents arrive as owned rows
  only; the function starts the halo exchange, computes the *interior* edges (both endpoints
  owned, the first ``n_interior`` edges) while the halo rows are in flight, waits, then
  computes the boundary edges. The backward pass runs the other way round: boundary edges
  first, so the halo rows' gradient is complete early; its reverse exchange is in flight while
  the interior edges' gradients are computed. Without ``recompute`` the two parts' autograd
  graphs are recorded in the forward pass and replayed (nothing recomputed).

Every result equals the plain formulation up to float rounding (the same sums in another order;
tests/models/test_chunked_edge_mlp.py).

Glossary: ``h`` node latents (owned rows, or all local rows ``(N_local, H)``); ``rows`` one row
per edge ``(E, R)``; ``src``/``dst`` ``(E,)`` local node indices.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import torch
from torch import nn

from partgnn.distributed.exchange import Exchange
from partgnn.memory.heap_release import (
    HeapReleasePolicy,
    release_free_heap,
)
from partgnn.models.chunk_gradients import ChunkGradients
from partgnn.models.chunk_size import chunk_edges
from partgnn.models.compute_policy import DEFAULT_COMPUTE, ComputePolicy
from partgnn.models.edge_chunks import (
    KeptGraphs,
    NodeProjections,
    Piece,
    chunk_ranges,
    compute_piece,
)
from partgnn.models.lean_mlp import EdgeMLP
from partgnn.models.node_sums import Incidence


@dataclass(frozen=True)
class EdgeNodes:
    """Where an edge MLP finds the latents of each edge's two endpoints.

    Attributes:
        h: Node latents ``(N_local, H)``; with ``exchange`` only the owned rows
            ``(n_owned, H)``.
        src: Source node of each edge ``(E,)``.
        dst: Target node of each edge ``(E,)``.
        exchange: Get the halo rows of ``h`` inside the MLP, overlapped with the interior edges
            (``None``: ``h`` holds them already).
        n_interior: With ``exchange``: edges ``[0, n_interior)`` have both endpoints owned (the
            rest touch a halo node).
        incidence: The edges listed by node, for the gradient of the gathered node terms
            (:meth:`EdgeMLP.gather`; used without recomputation and ``exchange``).
    """

    h: torch.Tensor
    src: torch.Tensor
    dst: torch.Tensor
    exchange: Exchange | None = None
    n_interior: int | None = None
    incidence: Incidence | None = None


def edge_mlp(
    mlp: nn.Sequential,
    rows: torch.Tensor,
    nodes: EdgeNodes | None = None,
    *,
    residual: bool = False,
    row_encoder: nn.Sequential | None = None,
    compute: ComputePolicy = DEFAULT_COMPUTE,
    kept: KeptGraphs | None = None,
    backward_follows: bool = False,
) -> torch.Tensor:
    """``mlp([h[src], h[dst], r])`` per edge (or ``mlp(r)`` without nodes), plus ``r`` when
    ``residual``, where ``r = row_encoder(rows)`` (``rows`` without an encoder).

    Args:
        mlp: First layer of width ``2 H + R`` (``R`` without nodes), then any tail.
        rows: One row per edge ``(E, R)``.
        nodes: The endpoints' latents (``None``: an MLP of the rows alone).
        residual: Return ``r + mlp(...)`` (widths must match).
        row_encoder: An MLP applied to the rows first, inside the chunks (with recomputation
            its output, ``E x H``, then never exists whole).
        compute: How (:class:`~partgnn.models.compute_policy.ComputePolicy`): with
            ``recompute`` only the inputs are kept for the backward pass and the MLP is
            recomputed there, in chunks of edges (else each layer's input is kept and only
            element-wise work recomputed); ``fused`` LayerNorm and activation in one pass per
            row (:class:`EdgeMLP`); ``heap_release`` after which chunked runs the freed C-heap
            pages go back to the system (not where the chunks' graphs are kept).
        kept: With ``recompute`` inside a recomputed region of steps, the MLP's
            :class:`KeptGraphs`: the same object in the region's forward pass and in its
            recomputation, which (``kept.replaying``: the region's last edge MLP, whose backward
            pass comes at once) keeps its chunks' autograd graphs there for the backward pass
            when the MLP runs in one chunk per part (then it is not computed a third time; the
            graphs hold what that third computation would, a little earlier).
        backward_follows: With ``recompute``, the backward pass follows this MLP at once (the
            edge head): run in one chunk per part, it keeps its autograd graph rather than
            being recomputed there (the same bytes, at the same moment).

    Returns:
        ``(E, out_features)``.
    """
    h, src, dst = (None, None, None) if nodes is None else (nodes.h, nodes.src, nodes.dst)
    exchange = None if nodes is None else nodes.exchange
    n_interior = None if nodes is None else nodes.n_interior
    edge = EdgeMLP(mlp, residual, row_encoder, compute.fused)
    if not compute.recompute and exchange is None:
        incidence = None if nodes is None else nodes.incidence
        node_terms = None if h is None else edge.gather(edge.project(h), src, dst, incidence)
        return edge.rows(rows, node_terms, recompute_elementwise=torch.is_grad_enabled())
    if exchange is not None and n_interior is None:
        raise ValueError("edge_mlp: an exchange needs the owned node latents and n_interior")
    call = _Call(
        edge=edge,
        parameters=[*mlp.parameters(), *(row_encoder.parameters() if row_encoder else ())],
        keep_graphs=not compute.recompute and torch.is_grad_enabled(),
        exchange=exchange,
        n_interior=rows.shape[0] if n_interior is None else n_interior,
        heap_release=compute.heap_release,
        chunk_bytes=compute.chunk_bytes,
    )
    if compute.recompute and torch.is_grad_enabled():
        if kept is not None:
            call.kept = kept
            if kept.replaying:
                # Kept out of the saved tensors of the region being recomputed: the region's
                # forward pass, which kept no graph, saved none of them.
                call.keep_graphs = call.hidden_graphs = call.at_once = call.one_chunk(rows)
        elif backward_follows:
            call.keep_graphs = call.at_once = call.one_chunk(rows)
    return _ChunkedEdgeMLP.apply(call, h, rows, src, dst, *call.parameters)


@dataclass
class _Call:
    """What one application of :class:`_ChunkedEdgeMLP` computes (not tensors it saves)."""

    edge: EdgeMLP
    parameters: list[nn.Parameter]
    keep_graphs: bool
    exchange: Exchange | None
    n_interior: int
    heap_release: HeapReleasePolicy
    chunk_bytes: int | None = None
    #: The kept graphs save their tensors outside any enclosing checkpoint's hooks.
    hidden_graphs: bool = False
    #: The kept graphs are back-propagated right after the forward pass (their element-wise
    #: outputs are kept rather than recomputed: see :func:`compute_piece`).
    at_once: bool = False
    #: Where a region's recomputation leaves its graphs for the forward pass's node.
    kept: KeptGraphs | None = None

    def one_chunk(self, rows: torch.Tensor) -> bool:
        """Whether the interior and the boundary edges each run in one chunk."""
        n_edges = rows.shape[0]
        parts = (self.n_interior, n_edges - self.n_interior)
        return all(self.chunk_edges(n, rows) >= n for n in parts if n)

    def chunk_edges(self, n_edges: int, rows: torch.Tensor) -> int:
        """Edges per chunk of a part of ``n_edges`` edges
        (:func:`~partgnn.models.chunk_size.chunk_edges`)."""
        width = self.edge.mlp[0].out_features
        element_bytes = rows.element_size()
        return chunk_edges(n_edges, width, element_bytes, self.chunk_bytes, rows.device)


class _ChunkedEdgeMLP(torch.autograd.Function):
    """An edge MLP over chunks of edges; see the module docstring."""

    @staticmethod
    def forward(ctx, call, h, rows, src, dst, *parameters):
        ctx.call = call
        ctx.autocast = _autocast_state(rows.device.type)
        exchange = call.exchange
        pending = exchange.start(h) if exchange is not None else None
        grad_h, grad_rows = ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        with _recording(ctx.autocast, call.keep_graphs, hidden=call.hidden_graphs):
            nodes = None
            if h is not None:
                n_halo = exchange.n_halo if exchange is not None else 0
                nodes = NodeProjections(call.edge, h, n_halo, grad_h=grad_h)
        n_edges = rows.shape[0]

        # Kept graphs are not split further: what each chunk keeps would interleave in the C
        # heap with what it frees, and the holes its temporaries leave are not reused (2x
        # the live bytes in RSS at 1e6 edges); whole parts are one allocation per tensor.
        def size(n: int) -> int | None:
            return None if call.keep_graphs else call.chunk_edges(n, rows)

        interior = chunk_ranges(0, call.n_interior, size(call.n_interior))
        boundary = chunk_ranges(call.n_interior, n_edges, size(n_edges - call.n_interior))
        if not interior and not boundary:
            boundary = [(0, 0)]
        out = None
        pieces: list[Piece] = []

        def run(chunks: list[tuple[int, int]]) -> None:
            nonlocal out
            for start, end in chunks:
                with _recording(ctx.autocast, call.keep_graphs, hidden=call.hidden_graphs):
                    piece = compute_piece(call.edge, nodes, rows, src, dst, start, end, grad_rows,
                                     used_at_once=call.at_once)  # fmt: skip
                whole = (start, end) == (0, n_edges)
                if whole:  # one chunk: its output is the result (no copy)
                    out = piece.out.detach()
                else:
                    if out is None:
                        out = piece.out.new_empty((n_edges, *piece.out.shape[1:]))
                    out[start:end] = piece.out.detach()
                if call.keep_graphs:
                    piece.release_values(out=not whole)  # (the whole's output is the result)
                    pieces.append(piece)

        run(interior)
        halo = None
        if pending is not None:
            halo = pending.wait()
            with _recording(ctx.autocast, call.keep_graphs, hidden=call.hidden_graphs):
                nodes.add_halo(halo)
        run(boundary)
        ctx.pieces = pieces
        ctx.nodes = nodes if call.keep_graphs else None
        if ctx.nodes is not None:
            ctx.nodes.release_values()
        ctx.kept = call.kept
        if call.hidden_graphs:  # a region's recomputation: for the forward pass's node
            call.kept.pieces, call.kept.nodes = ctx.pieces, ctx.nodes
            ctx.pieces, ctx.nodes, ctx.kept = [], None, None
        ctx.chunks = (interior, boundary)
        ctx.save_for_backward(h, halo, rows, src, dst)
        _release_temporaries(call, rows)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        h, halo, rows, src, dst = ctx.saved_tensors
        call, (interior, boundary) = ctx.call, ctx.chunks
        exchange = call.exchange
        grad_h_wanted, grad_rows_wanted = ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        trainable = [p for p in call.parameters if p.requires_grad]
        pieces, nodes = ctx.pieces, ctx.nodes
        if ctx.kept is not None and ctx.kept.pieces:
            pieces, nodes = ctx.kept.take()
        if nodes is None and h is not None:
            with _recording(ctx.autocast):
                n_halo = 0 if halo is None else halo.shape[0]
                nodes = NodeProjections(call.edge, h, n_halo, grad_h=grad_h_wanted)
                if halo is not None:
                    nodes.add_halo(halo)
        kept = {(piece.start, piece.end): piece for piece in pieces}
        grads = ChunkGradients(trainable, rows if grad_rows_wanted else None, nodes, src, dst)

        def run(chunks: list[tuple[int, int]]) -> None:
            for start, end in chunks:
                piece = kept.pop((start, end), None)
                if piece is None:
                    with _recording(ctx.autocast):
                        piece = compute_piece(call.edge, nodes, rows, src, dst, start, end,
                                         grad_rows_wanted, used_at_once=True,
                                         output_read=False)  # fmt: skip
                    piece.release_values()
                grads.add_piece(piece, grad_out[piece.start : piece.end])

        # Boundary edges first: then the halo rows' gradient is complete and goes back to its
        # owners while the interior edges' gradients are computed.
        run(boundary)
        pending = None
        if nodes is not None and exchange is not None:
            grad_halo = grads.through_halo_projection()
            if grad_h_wanted:
                pending = exchange.start_reverse(grad_halo)
        run(interior)
        grad_h = grads.through_owned_projection() if nodes is not None else None
        if pending is not None:
            grad_h.index_add_(0, exchange.send_index, pending.wait())
        ctx.pieces, ctx.nodes = [], None
        _release_temporaries(call, rows)
        return None, grad_h, grads.rows, None, None, *grads.for_parameters(call.parameters)


def _release_temporaries(call: _Call, rows: torch.Tensor) -> None:
    """After the chunks of an event-sized edge MLP: their temporaries are freed, and their
    pages go back to the system (:mod:`~partgnn.memory.heap_release`)."""
    width = call.edge.mlp[0].out_features
    if not call.keep_graphs and call.heap_release.releases(rows.shape[0], width):
        release_free_heap(rows.device)


def _autocast_state(device_type: str) -> tuple[str, bool, torch.dtype]:
    return (
        device_type,
        torch.is_autocast_enabled(device_type),
        torch.get_autocast_dtype(device_type),
    )


@contextmanager
def _recording(
    autocast: tuple[str, bool, torch.dtype], enabled: bool = True, *, hidden: bool = False
) -> Iterator[None]:
    """Autograd on (if ``enabled``), under the forward pass's autocast state (the backward
    pass recomputes under it, as torch.utils.checkpoint does); ``hidden``: the tensors the
    graph saves bypass the saved-tensor hooks around it (an enclosing checkpoint's)."""
    device_type, autocast_on, dtype = autocast
    grad = torch.enable_grad() if enabled else nullcontext()
    hooks = _unhooked() if hidden else nullcontext()
    with grad, hooks, torch.autocast(device_type, dtype=dtype, enabled=autocast_on):
        yield


def _unhooked() -> torch.autograd.graph.saved_tensors_hooks:
    """Saved-tensor hooks that keep tensors as they are."""
    return torch.autograd.graph.saved_tensors_hooks(_same, _same)


def _same(tensor: torch.Tensor) -> torch.Tensor:
    return tensor
