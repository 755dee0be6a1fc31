"""The pieces a chunked edge MLP (:mod:`partgnn.models.chunked_edge_mlp`) is made of: the chunks
of edges, the node projections they gather from, one chunk's computed output with its autograd
graph (:class:`Piece`), and the graphs a recomputed region keeps for its forward pass's backward
pass (:class:`KeptGraphs`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from partgnn.models.lean_mlp import EdgeMLP


def chunk_ranges(start: int, stop: int, size: int | None = None) -> list[tuple[int, int]]:
    """``[start, stop)`` in chunks of ``size`` edges (``None``: one chunk; none when empty)."""
    if size is None:
        return [(start, stop)] if stop > start else []
    return [(first, min(first + size, stop)) for first in range(start, stop, size)]


class NodeProjections:
    """The node projections the chunks gather from, with the autograd graphs that made them.

    ``all`` is one ``(N_local, 2 H_out)`` tensor (no graph) the chunks gather from; its owned
    rows and its halo rows come from two separate graphs, so the halo rows' gradient can be
    sent back before the owned rows' is known.
    """

    def __init__(self, edge: EdgeMLP, h: torch.Tensor, n_halo: int, *, grad_h: bool) -> None:
        self.edge = edge
        self.h = h.detach().requires_grad_(grad_h)
        self.owned = edge.project(self.h)
        if n_halo:
            self.all = self.owned.new_empty((self.h.shape[0] + n_halo, self.owned.shape[1]))
            self.all[: self.h.shape[0]] = self.owned.detach()
        else:
            self.all = self.owned.detach()
        self.halo: torch.Tensor | None = None
        self.halo_projected: torch.Tensor | None = None

    @property
    def n_owned(self) -> int:
        return self.h.shape[0]

    @property
    def n_rows(self) -> int:
        """Local rows ``N_local`` (owned and halo)."""
        return self.all.shape[0]

    def release_values(self) -> None:
        """Frees the projections' values, keeping the tensors for their graphs: the chunks'
        gathers and the projections' own graphs never read them again."""
        for tensor in (self.all, self.owned, self.halo_projected):
            if tensor is not None and tensor._base is None:
                tensor.untyped_storage().resize_(0)

    def add_halo(self, halo: torch.Tensor) -> None:
        """Projects the halo rows ``(n_halo, H)`` into ``all``."""
        self.halo = halo.detach().requires_grad_(self.h.requires_grad)
        self.halo_projected = self.edge.project(self.halo)
        with torch.no_grad():
            self.all[self.n_owned :] = self.halo_projected


@dataclass
class Piece:
    """One chunk of edges ``[start, end)`` and the autograd graph of its output, whose leaves
    are the chunk's rows and its node terms (gathered outside the graph: their gradient is
    scattered into the projections' by :class:`ChunkGradients`, never as an ``N``-row tensor per
    chunk)."""

    start: int
    end: int
    out: torch.Tensor
    rows: torch.Tensor
    node_terms: torch.Tensor | None

    def release_values(self, *, out: bool = True) -> None:
        """Frees the values of the output (unless not ``out``, or its own operation saved it:
        a last ReLU keeps its result for its gradient) and of the node terms: the graph needs
        these tensors, not their values (no operation of a chunk saves the node terms it
        adds)."""
        free_out = out and not saves_its_result(self.out)
        for tensor in (self.out if free_out else None, self.node_terms):
            if tensor is not None and tensor._base is None:
                tensor.untyped_storage().resize_(0)


def saves_its_result(tensor: torch.Tensor) -> bool:
    """Whether the operation that made ``tensor`` saved it for its backward pass (ReLU,
    sigmoid, tanh: ``_saved_result``)."""
    function = tensor.grad_fn
    return function is not None and hasattr(function, "_saved_result")


def compute_piece(
    edge: EdgeMLP,
    nodes: NodeProjections | None,
    rows: torch.Tensor,
    src: torch.Tensor | None,
    dst: torch.Tensor | None,
    start: int,
    end: int,
    grad_rows: bool,
    *,
    used_at_once: bool = False,
    output_read: bool = True,
) -> Piece:
    """The MLP of edges ``[start, end)`` (an autograd graph if recording).

    ``used_at_once``: the piece's graph is back-propagated right away (the backward pass's
    recomputation), so its element-wise outputs are kept for that (a chunk's worth) rather than
    recomputed once more. ``output_read=False``: only the graph of the piece's output is used,
    not its values (the backward pass's recomputation): a last fused LayerNorm + activation
    records its graph without computing them (:meth:`EdgeMLP.rows`).
    """
    recording = torch.is_grad_enabled()
    piece_rows = rows[start:end].detach().requires_grad_(grad_rows and recording)
    node_terms = None
    if nodes is not None:
        with torch.no_grad():
            node_terms = EdgeMLP.gather(nodes.all, src[start:end], dst[start:end])
        node_terms.requires_grad_(recording)
    out = edge.rows(piece_rows, node_terms, recompute_elementwise=recording and not used_at_once,
                    release_node_terms=True, output_read=output_read)  # fmt: skip
    return Piece(start, end, out, piece_rows, node_terms)


class KeptGraphs:
    """The autograd graphs of one edge MLP's chunks, computed by a recomputed region of steps
    and kept for the backward pass of the region's forward pass.

    ``torch.utils.checkpoint`` back-propagates the autograd nodes of a region's *forward* pass,
    handing them the tensors the recomputation saved; nothing else of the recomputation
    reaches them. The region's forward pass and its recomputation call the edge MLP with the
    same object (made in the forward pass, handed out again in order in the recomputation): the
    recomputation puts its chunks' graphs here where told to (``replaying``: the region's last
    edge MLP), and the forward pass's node takes them in its backward pass instead of computing
    the chunks once more.
    """

    def __init__(self) -> None:
        self.replaying = False
        self.pieces: list[Piece] = []
        self.nodes: NodeProjections | None = None

    def take(self) -> tuple[list[Piece], NodeProjections | None]:
        """The kept pieces and node projections (then forgotten here)."""
        pieces, nodes = self.pieces, self.nodes
        self.pieces, self.nodes = [], None
        return pieces, nodes
