"""The gradients of a chunked edge MLP's backward pass (:mod:`partgnn.models.chunked_edge_mlp`),
summed chunk by chunk: the parameters', the rows', and the node projections' (scattered onto
their source and target rows in at least float32), then back through the projections to the
halo rows first and the owned rows last."""

from __future__ import annotations

import torch
from torch import nn

from partgnn.models.edge_chunks import (
    NodeProjections,
    Piece,
)


class ChunkGradients:
    """Gradients of the parameters, the node projections and the rows, summed over chunks."""

    def __init__(
        self,
        trainable: list[nn.Parameter],
        rows: torch.Tensor | None,
        nodes: NodeProjections | None,
        src: torch.Tensor | None,
        dst: torch.Tensor | None,
    ) -> None:
        self.trainable, self.nodes, self.src, self.dst = trainable, nodes, src, dst
        self.parameters: list[torch.Tensor | None] = [None] * len(trainable)
        #: The rows' gradient ``(E, R)`` (``None`` if not wanted), allocated when a chunk that
        #: is not all the edges writes its part.
        self._rows_like = rows
        self._rows: torch.Tensor | None = None
        self.grad_src: torch.Tensor | None = None
        self.grad_dst: torch.Tensor | None = None

    def add_piece(self, piece: Piece, grad_out: torch.Tensor) -> None:
        if not piece.out.requires_grad:
            self._set_rows(piece, None)
            return
        inputs = [*self.trainable]
        if piece.node_terms is not None:
            inputs.append(piece.node_terms)
        if self._rows_like is not None:
            inputs.append(piece.rows)
        grads = torch.autograd.grad(piece.out, inputs, grad_out, allow_unused=True)
        self._add_parameters(grads)
        grad_terms = grads[len(self.trainable)] if piece.node_terms is not None else None
        if grad_terms is not None:
            # d(terms)/d(projections): W_src h_src lands on the source rows, W_dst h_dst on the
            # target rows (two contiguous buffers: index_add_ into a strided view is slow).
            # Summed in at least float32: a high-degree node adds up many edges' terms, which
            # bf16 (8 bits of mantissa) would round away.
            if self.grad_src is None:
                nodes = self.nodes
                shape = (nodes.n_rows, nodes.owned.shape[1] // 2)
                dtype = accumulation_dtype(nodes.owned.dtype)
                self.grad_src = nodes.owned.new_zeros(shape, dtype=dtype)
                self.grad_dst = nodes.owned.new_zeros(shape, dtype=dtype)
            grad_terms = grad_terms.to(self.grad_src.dtype)
            self.grad_src.index_add_(0, self.src[piece.start : piece.end], grad_terms)
            self.grad_dst.index_add_(0, self.dst[piece.start : piece.end], grad_terms)
        if self._rows_like is not None:
            self._set_rows(piece, grads[-1])

    @property
    def rows(self) -> torch.Tensor | None:
        """The rows' gradient ``(E, R)`` (``None`` if not wanted)."""
        if self._rows is None and self._rows_like is not None:
            self._rows = torch.zeros_like(self._rows_like)
        return self._rows

    def _set_rows(self, piece: Piece, grad: torch.Tensor | None) -> None:
        """The rows' gradient of a chunk (``None``: zeros)."""
        like = self._rows_like
        if like is None:
            return
        if grad is not None and (piece.start, piece.end) == (0, like.shape[0]):
            self._rows = grad  # one chunk: its gradient is the result (no copy)
            return
        if self._rows is None:
            self._rows = torch.empty_like(like)
        self._rows[piece.start : piece.end] = 0 if grad is None else grad

    def through_halo_projection(self) -> torch.Tensor:
        """The halo rows' gradient ``(n_halo, H)``; adds the projection's parameter gradient."""
        nodes = self.nodes
        grad = self._projection_grad(nodes.n_owned, nodes.n_rows)
        return self._through(nodes.halo_projected, nodes.halo, grad)

    def through_owned_projection(self) -> torch.Tensor | None:
        """The owned rows' gradient ``(n_owned, H)`` (``None`` if not wanted)."""
        nodes = self.nodes
        grad = self._projection_grad(0, nodes.n_owned)
        return self._through(nodes.owned, nodes.h, grad)

    def for_parameters(self, parameters: list[nn.Parameter]) -> list[torch.Tensor | None]:
        by_parameter = dict(zip(map(id, self.trainable), self.parameters, strict=True))
        return [by_parameter.get(id(p)) for p in parameters]

    def _projection_grad(self, start: int, end: int) -> torch.Tensor:
        """The gradient of the projections of rows ``[start, end)``, ``(end - start, 2 H_out)``."""
        if self.grad_src is None:
            return self.nodes.owned.new_zeros((end - start, self.nodes.owned.shape[1]))
        grad = torch.cat([self.grad_src[start:end], self.grad_dst[start:end]], dim=1)
        return grad.to(self.nodes.owned.dtype)

    def _through(
        self, projected: torch.Tensor, h: torch.Tensor, grad: torch.Tensor
    ) -> torch.Tensor | None:
        wanted = [*self.trainable, *([h] if h.requires_grad else [])]
        if not wanted or not projected.requires_grad:
            return torch.zeros_like(h) if h.requires_grad else None
        grads = torch.autograd.grad(projected, wanted, grad, allow_unused=True)
        self._add_parameters(grads)
        if not h.requires_grad:
            return None
        return grads[-1] if grads[-1] is not None else torch.zeros_like(h)

    def _add_parameters(self, grads: tuple[torch.Tensor | None, ...]) -> None:
        for index in range(len(self.trainable)):
            self.parameters[index] = add_gradient(self.parameters[index], grads[index])


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for half-precision gradients, else their own dtype."""
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


def add_gradient(total: torch.Tensor | None, value: torch.Tensor | None) -> torch.Tensor | None:
    if value is None:
        return total
    return value if total is None else total.add_(value)
