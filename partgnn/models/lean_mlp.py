"""MLPs of the Interaction Network that keep few bytes per edge for the backward pass.

Three savings, each exact (the same function, evaluated in another order):

- **No concatenation.** A first layer on ``[h_src, h_dst, r]`` is ``W_s h_src + W_d h_dst +
  W_r r + b``: node latents are projected once per node (``N`` rows, not ``E``) and the
  projections gathered per edge (:func:`first_layer`), so neither the ``E x 3H`` concatenation
  nor its copy for the backward pass exists.
- **Element-wise work recomputed.** LayerNorm and the activation keep only their input for the
  backward pass and are run again there (:func:`mlp_tail` with ``recompute_elementwise``):
  a 2-layer MLP keeps 3 rows of ``H`` per edge instead of 5.
- **Whole MLP recomputed, in chunks of edges** (:func:`edge_mlp` with ``recompute=True``,
  activation checkpointing at the granularity of one MLP): nothing is kept but the inputs,
  which the model holds anyway, and forward and backward run over chunks of edges, so at most
  one chunk's activations exist at a time. The halo exchange is not part of it and is never
  repeated.

Glossary: ``h_local`` node latents ``(N_local, H)``; ``rows`` one row per edge ``(E, R)`` (edge
latents, or edge features for an encoder); ``src``/``dst`` ``(E,)`` local node indices.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial

import torch
from torch import nn
from torch.nn import functional
from torch.utils.checkpoint import checkpoint

#: Forward and backward of a recomputed edge MLP run over this many chunks of edges at most.
EDGE_CHUNKS = 16
#: ...each of at least this many edges (small graphs run in one chunk).
MIN_CHUNK_EDGES = 4096


def first_layer(linear: nn.Linear, blocks: Sequence[torch.Tensor]) -> torch.Tensor:
    """``linear(torch.cat(blocks, dim=-1))`` without the concatenation.

    Args:
        linear: A layer whose input width is the sum of the blocks' widths.
        blocks: Tensors ``(M, W_i)`` in the order of the concatenation.

    Returns:
        ``(M, out_features)``.
    """
    weights = linear.weight.split([block.shape[-1] for block in blocks], dim=1)
    out = functional.linear(blocks[0], weights[0], linear.bias)
    for block, weight in zip(blocks[1:], weights[1:], strict=True):
        out = out + functional.linear(block, weight)
    return out


def mlp_tail(
    mlp: nn.Sequential, z: torch.Tensor, *, recompute_elementwise: bool = False
) -> torch.Tensor:
    """Applies ``mlp`` after its first Linear layer to ``z``, that layer's output.

    Args:
        mlp: Linear layers, each followed by optional element-wise modules (norm, activation).
        z: Output of ``mlp[0]``, ``(M, H)``.
        recompute_elementwise: Keep only the input of each run of element-wise modules for
            the backward pass and recompute the run there (while autograd records).
    """
    modules = list(mlp)[1:]
    index = 0
    while index < len(modules):
        if isinstance(modules[index], nn.Linear):
            z = modules[index](z)
            index += 1
            continue
        end = index
        while end < len(modules) and not isinstance(modules[end], nn.Linear):
            end += 1
        run = partial(_apply_in_turn, modules[index:end])
        if recompute_elementwise and torch.is_grad_enabled() and z.requires_grad:
            z = checkpoint(run, z, use_reentrant=False)
        else:
            z = run(z)
        index = end
    return z


def _apply_in_turn(modules: list[nn.Module], z: torch.Tensor) -> torch.Tensor:
    for module in modules:
        z = module(z)
    return z


def edge_mlp(
    mlp: nn.Sequential,
    rows: torch.Tensor,
    *,
    h_local: torch.Tensor | None = None,
    src: torch.Tensor | None = None,
    dst: torch.Tensor | None = None,
    residual: bool = False,
    recompute: bool = False,
    row_encoder: nn.Sequential | None = None,
) -> torch.Tensor:
    """``mlp([h_local[src], h_local[dst], r])`` per edge (or ``mlp(r)`` without nodes), plus
    ``r`` when ``residual``, where ``r = row_encoder(rows)`` (``rows`` without an encoder).

    Args:
        mlp: First layer of width ``2 H + R`` (``R`` without nodes), then any tail.
        rows: One row per edge ``(E, R)``.
        h_local: Node latents ``(N_local, H)``, or ``None`` for an MLP of the rows alone.
        src: Source node of each edge ``(E,)`` (with ``h_local``).
        dst: Target node of each edge ``(E,)`` (with ``h_local``).
        residual: Return ``rows + mlp(...)`` (widths must match).
        recompute: Keep only the inputs for the backward pass and recompute the MLP there, in
            chunks of edges; else keep each layer's input and recompute only element-wise work.
        row_encoder: An MLP applied to the rows first, inside the recomputed region when
            ``recompute`` (its output, ``E x H``, then never exists whole).

    Returns:
        ``(E, out_features)``.
    """
    if recompute and torch.is_grad_enabled():
        return _RecomputedEdgeMLP.apply(
            mlp, row_encoder, residual, h_local, rows, src, dst, *_parameters(mlp, row_encoder)
        )
    edge = _EdgeMLP(mlp, residual, h_local, src, dst, row_encoder=row_encoder)
    return edge.rows(rows, recompute_elementwise=torch.is_grad_enabled())


def _parameters(mlp: nn.Sequential, row_encoder: nn.Sequential | None) -> list[nn.Parameter]:
    """The parameters an edge MLP uses, in the order the recomputing function takes them."""
    return [*mlp.parameters(), *(row_encoder.parameters() if row_encoder is not None else ())]


class _EdgeMLP:
    """One edge MLP's computation, split into the node projections and the rows."""

    def __init__(
        self,
        mlp: nn.Sequential,
        residual: bool = False,
        h_local: torch.Tensor | None = None,
        src: torch.Tensor | None = None,
        dst: torch.Tensor | None = None,
        row_encoder: nn.Sequential | None = None,
    ) -> None:
        self.mlp, self.residual, self.src, self.dst = mlp, residual, src, dst
        self.row_encoder = None if row_encoder is None else _EdgeMLP(row_encoder)
        linear: nn.Linear = mlp[0]
        if h_local is None:
            self.row_weight = linear.weight
            self.projections = None
        else:
            width = h_local.shape[-1]
            rows_width = linear.in_features - 2 * width
            w_src, w_dst, self.row_weight = linear.weight.split([width, width, rows_width], 1)
            self.projections = self.project(h_local, w_src, w_dst)

    @staticmethod
    def project(
        h_local: torch.Tensor, w_src: torch.Tensor, w_dst: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(h_local W_src^T, h_local W_dst^T)``, each ``(N_local, H_out)``."""
        both = functional.linear(h_local, torch.cat([w_src, w_dst]))
        return both[:, : w_src.shape[0]], both[:, w_src.shape[0] :]

    def rows(
        self,
        rows: torch.Tensor,
        *,
        start: int = 0,
        projections: tuple[torch.Tensor, torch.Tensor] | None = None,
        recompute_elementwise: bool = False,
    ) -> torch.Tensor:
        """The MLP of ``rows``, which are the edges ``[start, start + len(rows))``."""
        if self.row_encoder is not None:
            rows = self.row_encoder.rows(rows, recompute_elementwise=recompute_elementwise)
        z = functional.linear(rows, self.row_weight, self.mlp[0].bias)
        projections = projections or self.projections
        if projections is not None:
            end = start + rows.shape[0]
            z = z + projections[0].index_select(0, self.src[start:end])
            z = z + projections[1].index_select(0, self.dst[start:end])
        out = mlp_tail(self.mlp, z, recompute_elementwise=recompute_elementwise)
        return rows + out if self.residual else out


def _chunks(n_rows: int) -> list[tuple[int, int]]:
    size = max(MIN_CHUNK_EDGES, -(-n_rows // EDGE_CHUNKS))
    return [(start, min(start + size, n_rows)) for start in range(0, n_rows, size)] or [(0, 0)]


class _RecomputedEdgeMLP(torch.autograd.Function):
    """Edge MLP that saves only its inputs; forward and backward run in chunks of edges."""

    @staticmethod
    def forward(ctx, mlp, row_encoder, residual, h_local, rows, src, dst, *parameters):
        edge = _EdgeMLP(mlp, residual, h_local, src, dst, row_encoder=row_encoder)
        out = None
        for start, end in _chunks(rows.shape[0]):
            piece = edge.rows(rows[start:end], start=start)
            if out is None:
                out = piece.new_empty((rows.shape[0], *piece.shape[1:]))
            out[start:end] = piece
        ctx.mlp, ctx.row_encoder, ctx.residual = mlp, row_encoder, residual
        # The backward pass recomputes under the forward's autocast (bf16 runs), as
        # torch.utils.checkpoint does.
        device_type = rows.device.type
        ctx.autocast = (
            device_type,
            torch.is_autocast_enabled(device_type),
            torch.get_autocast_dtype(device_type),
        )
        ctx.save_for_backward(h_local, rows, src, dst)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        h_local, rows, src, dst = ctx.saved_tensors
        parameters = _parameters(ctx.mlp, ctx.row_encoder)
        trainable = [p for p in parameters if p.requires_grad]
        with _recording(ctx.autocast):
            h = h_local
            if h is not None:
                h = h.detach().requires_grad_(ctx.needs_input_grad[3])
            edge = _EdgeMLP(ctx.mlp, ctx.residual, h, src, dst, row_encoder=ctx.row_encoder)
        projections = None
        if edge.projections is not None:
            projections = tuple(p.detach().requires_grad_() for p in edge.projections)
        grad_rows = torch.empty_like(rows) if ctx.needs_input_grad[4] else None
        grad_parameters: list[torch.Tensor | None] = [None] * len(trainable)
        grad_projections: list[torch.Tensor | None] = [None, None]
        for start, end in _chunks(rows.shape[0]):
            with _recording(ctx.autocast):
                piece_rows = rows[start:end].detach().requires_grad_(grad_rows is not None)
                piece = edge.rows(piece_rows, start=start, projections=projections)
            inputs = [*trainable, *(projections or ())]
            if grad_rows is not None:
                inputs.append(piece_rows)
            grads = torch.autograd.grad(piece, inputs, grad_out[start:end], allow_unused=True)
            for index in range(len(trainable)):
                grad_parameters[index] = _add(grad_parameters[index], grads[index])
            if projections is not None:
                for index in range(2):
                    grad_projections[index] = _add(
                        grad_projections[index], grads[len(trainable) + index]
                    )
            if grad_rows is not None:
                grad_rows[start:end] = grads[-1]
        grad_h = None
        if projections is not None:
            wanted = [*trainable, *([h] if h.requires_grad else [])]
            grads = torch.autograd.grad(
                edge.projections, wanted, grad_projections, allow_unused=True
            )
            for index in range(len(trainable)):
                grad_parameters[index] = _add(grad_parameters[index], grads[index])
            if h.requires_grad:
                grad_h = grads[-1]
        by_parameter = dict(zip(map(id, trainable), grad_parameters, strict=True))
        return (
            None,
            None,
            None,
            grad_h,
            grad_rows,
            None,
            None,
            *(by_parameter.get(id(p)) for p in parameters),
        )


@contextmanager
def _recording(autocast: tuple[str, bool, torch.dtype]) -> Iterator[None]:
    """Autograd on, under the forward pass's autocast state."""
    device_type, enabled, dtype = autocast
    with torch.enable_grad(), torch.autocast(device_type, dtype=dtype, enabled=enabled):
        yield


def _add(total: torch.Tensor | None, value: torch.Tensor | None) -> torch.Tensor | None:
    if value is None:
        return total
    return value if total is None else total.add_(value)
