"""MLPs of the Interaction Network that keep few bytes per edge for the backward pass.

Two savings, each exact (the same function, evaluated in another order):

- **No concatenation.** A first layer on ``[h_src, h_dst, r]`` is ``W_s h_src + W_d h_dst +
  W_r r + b``: node latents are projected once per node (``N`` rows, not ``E``) and the
  projections gathered per edge (:class:`EdgeMLP`), so neither the
  ``E x 3H`` concatenation nor its copy for the backward pass exists.
- **Element-wise work recomputed.** LayerNorm and the activation keep only their input for the
  backward pass and are run again there (:func:`mlp_tail` with ``recompute_elementwise``):
  a 2-layer MLP keeps 3 rows of ``H`` per edge instead of 5.

:mod:`partgnn.models.chunked_edge_mlp` runs an :class:`EdgeMLP` over chunks of edges (whole MLPs
recomputed, halo exchange overlapped).

Glossary: ``h`` node latents ``(N, H)``; ``rows`` one row per edge ``(E, R)`` (edge latents, or
edge features for an encoder); ``src``/``dst`` ``(E,)`` local node indices.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import torch
from torch import nn
from torch.nn import functional
from torch.utils.checkpoint import checkpoint

from partgnn.models.fused_norm_activation import fusable, kernel_applies, norm_activation
from partgnn.models.graph_batch_norm import GraphBatchNorm
from partgnn.models.node_sums import Incidence, sums_by_node


def first_layer(
    linear: nn.Linear, blocks: Sequence[torch.Tensor], *, bias: bool = True
) -> torch.Tensor:
    """``linear(torch.cat(blocks, dim=-1))`` (without its bias unless ``bias``) for node rows.

    The blocks are concatenated: a node MLP's rows are ``N ~ E / 10``, so the copy is small
    next to the edge tensors, and one matmul is one kernel launch forward and two backward,
    where a matmul per block took ``2 B - 1`` and ``~4 B`` (issue 49: the launches bound a GPU
    step). Edge rows are never concatenated (:class:`EdgeMLP`).

    Args:
        linear: A layer whose input width is the sum of the blocks' widths.
        blocks: Tensors ``(M, W_i)`` in the order of the concatenation.
        bias: Add the layer's bias (else the caller does).

    Returns:
        ``(M, out_features)``.
    """
    rows = blocks[0] if len(blocks) == 1 else torch.cat(list(blocks), dim=-1)
    return functional.linear(rows, linear.weight, linear.bias if bias else None)


def block_mlp(
    mlp: nn.Sequential,
    blocks: Sequence[torch.Tensor],
    *,
    recompute_elementwise: bool = False,
    fused: bool = False,
    residual: torch.Tensor | None = None,
) -> torch.Tensor:
    """``mlp(torch.cat(blocks, dim=-1))`` (plus ``residual``) of node rows (:func:`first_layer`,
    then :func:`mlp_tail`; fused, the first layer's bias and the residual are added in the
    kernel)."""
    linear: nn.Linear = mlp[0]
    in_kernel = fused and _run_takes_bias(list(mlp)[1:], 0, blocks[0], linear)
    z = first_layer(linear, blocks, bias=not in_kernel)
    return mlp_tail(
        mlp, z, recompute_elementwise=recompute_elementwise, fused=fused, residual=residual,
        shift=linear.bias if in_kernel else None,
    )  # fmt: skip


def mlp_tail(
    mlp: nn.Sequential,
    z: torch.Tensor,
    *,
    recompute_elementwise: bool = False,
    fused: bool = False,
    residual: torch.Tensor | None = None,
    shift: torch.Tensor | None = None,
    output_read: bool = True,
) -> torch.Tensor:
    """Applies ``mlp`` after its first Linear layer to ``z + shift``, that layer's output.

    Args:
        mlp: Linear layers, each followed by optional element-wise modules (norm, activation).
        z: Output of ``mlp[0]``, ``(M, H)`` (without its bias when ``shift`` is given).
        recompute_elementwise: Keep only the input of each run of element-wise modules for
            the backward pass and recompute the run there (while autograd records).
        fused: Runs of ``[LayerNorm, activation]`` in one pass per row where the kernel
            applies (:mod:`~partgnn.models.fused_norm_activation`; they keep only their
            input), each adding the bias of the Linear layer before it; the others as without.
        residual: Returns ``residual + mlp(z)`` (fused into the last run when it can be).
        shift: The bias of ``mlp[0]``, when ``z`` is without it ``(H,)``.
        output_read: ``False`` when only the result's autograd graph is used, not its values
            (a backward pass's recomputation): a last fused run then records its graph
            without computing its values (they are left unset).
    """
    modules = list(mlp)[1:]
    index = 0
    while index < len(modules):
        if isinstance(modules[index], nn.Linear):
            linear = modules[index]
            index += 1
            if fused and _run_takes_bias(modules, index, z, linear):
                z, shift = functional.linear(z, linear.weight), linear.bias
            else:
                z = linear(z)
            continue
        end = _run_end(modules, index)
        run = modules[index:end]
        last = end == len(modules)
        post = residual if last else None
        if fused and fusable(run) and kernel_applies(z, post):
            z = norm_activation(z, run, shift=shift, post=post, values=output_read or not last)
            if last:
                residual = None
        else:
            if shift is not None:
                z = z + shift
            if (
                recompute_elementwise and torch.is_grad_enabled() and z.requires_grad
                # A recomputed BatchNorm would normalise again, outside its forward pass's
                # statistics: a run with one keeps its tensors.
                and not any(isinstance(module, GraphBatchNorm) for module in run)
            ):  # fmt: skip
                z = checkpoint(partial(_apply_in_turn, run), z, use_reentrant=False)
            else:
                z = _apply_in_turn(run, z)
        shift = None
        index = end
    if shift is not None:
        z = z + shift
    return z if residual is None else residual + z


def _run_takes_bias(
    modules: list[nn.Module], index: int, z: torch.Tensor, linear: nn.Linear
) -> bool:
    """Whether the run of element-wise modules at ``index`` (after ``linear``) can add the
    layer's bias in the fused kernel (a run the kernel computes)."""
    end = _run_end(modules, index)
    return (
        linear.bias is not None and end > index and fusable(modules[index:end])
        and kernel_applies(z)
    )  # fmt: skip


def _run_end(modules: list[nn.Module], index: int) -> int:
    """The end of the run of element-wise modules starting at ``index``: the next Linear
    layer's index, or the end of ``modules``."""
    end = index
    while end < len(modules) and not isinstance(modules[end], nn.Linear):
        end += 1
    return end


def _apply_in_turn(modules: list[nn.Module], z: torch.Tensor) -> torch.Tensor:
    for module in modules:
        z = module(z)
        if isinstance(module, nn.LayerNorm):
            z = in_autocast_dtype(z)
    return z


def in_autocast_dtype(z: torch.Tensor) -> torch.Tensor:
    """``z`` in autocast's dtype when autocast is on for its device, else ``z``.

    CUDA autocast computes LayerNorm in float32 and returns float32, where CPU autocast returns
    the input's bf16: cast after it, the latents (and the halo rows exchanged) are bf16 on both,
    so a bf16 run computes, stores and sends the same on CPUs and GPUs.
    """
    device_type = z.device.type
    if not (
        torch.amp.is_autocast_available(device_type) and torch.is_autocast_enabled(device_type)
    ):
        return z
    dtype = torch.get_autocast_dtype(device_type)
    return z.to(dtype) if z.is_floating_point() and z.dtype != dtype else z


class EdgeMLP:
    """An MLP over edges whose first layer reads ``[h_src, h_dst, r]``, computed in two parts:
    the node projections (once per node, :meth:`project`) and the rows (:meth:`rows`, any
    slice of the edges), so the edges can be computed in chunks and in any order.

    Args:
        mlp: First layer of width ``2 H + R`` (``R``: rows only), then any tail.
        residual: :meth:`rows` returns ``r + mlp(...)`` (widths must match).
        row_encoder: An MLP applied to the rows first (``r = row_encoder(rows)``).
        fused: Element-wise runs fused (:func:`mlp_tail`); the first layer's bias is then
            part of the source nodes' projections, so a chunk's first layer is one ``addmm``
            onto its node terms.
    """

    def __init__(
        self,
        mlp: nn.Sequential,
        residual: bool = False,
        row_encoder: nn.Sequential | None = None,
        fused: bool = False,
    ) -> None:
        self.mlp, self.residual, self.fused = mlp, residual, fused
        self.row_encoder = None if row_encoder is None else EdgeMLP(row_encoder, fused=fused)

    def project(self, h: torch.Tensor) -> torch.Tensor:
        """``[h W_src^T, h W_dst^T]`` side by side ``(N, 2 H_out)``, for latents ``(N, H)``
        (fused: ``[h W_src^T + b, h W_dst^T]``)."""
        width = h.shape[-1]
        linear: nn.Linear = self.mlp[0]
        w_src, w_dst = linear.weight[:, : 2 * width].split(width, dim=1)
        bias = None
        if self.fused and linear.bias is not None:
            bias = torch.cat([linear.bias, torch.zeros_like(linear.bias)])
        return functional.linear(h, torch.cat([w_src, w_dst]), bias)

    @staticmethod
    def gather(
        projections: torch.Tensor,
        src: torch.Tensor,
        dst: torch.Tensor,
        incidence: Incidence | None = None,
    ) -> torch.Tensor:
        """The node terms of some edges' first layer, ``W_src h_src + W_dst h_dst``, ``(M, H_out)``.

        Args:
            projections: :meth:`project` of the local node latents ``(N_local, 2 H_out)``.
            src: The edges' source nodes ``(M,)``.
            dst: Their target nodes ``(M,)``.
            incidence: Of these edges: the gradient of ``projections`` is then summed node by
                node by the kernel (:mod:`~partgnn.models.node_sums`), where it applies.
        """
        if (
            incidence is not None
            and torch.is_grad_enabled()
            and projections.requires_grad
            and incidence.serves(projections, projections.shape[0])
        ):
            return _GatherBothEnds.apply(projections, src, dst, incidence)
        return EdgeMLP._gather(projections, src, dst)

    @staticmethod
    def _gather(projections: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        width = projections.shape[1] // 2
        gathered = projections[:, :width].index_select(0, src)
        return gathered + projections[:, width:].index_select(0, dst)

    def rows(
        self,
        rows: torch.Tensor,
        node_terms: torch.Tensor | None = None,
        *,
        recompute_elementwise: bool = False,
        release_node_terms: bool = False,
        output_read: bool = True,
    ) -> torch.Tensor:
        """The MLP of some edges.

        Args:
            rows: The edges' rows ``(M, R)``.
            node_terms: Their :meth:`gather` ``(M, H_out)``; ``None`` for an MLP of the rows
                alone.
            recompute_elementwise: See :func:`mlp_tail`.
            release_node_terms: Free the node terms' values once the first layer has added
                them (the caller's own tensor, read by nothing else; no operation saves a
                summand): one ``M x H_out`` tensor less while the rest of the MLP runs.
            output_read: See :func:`mlp_tail`.

        Returns:
            ``(M, out_features)``.
        """
        if self.row_encoder is not None:
            rows = self.row_encoder.rows(rows, recompute_elementwise=recompute_elementwise)
        linear: nn.Linear = self.mlp[0]
        row_weight = linear.weight[:, linear.in_features - rows.shape[-1] :]
        shift = None
        if self.fused and node_terms is not None:
            z = torch.addmm(node_terms, rows, row_weight.t())
        elif self.fused and _run_takes_bias(list(self.mlp)[1:], 0, rows, linear):
            z, shift = functional.linear(rows, row_weight), linear.bias
        else:
            z = functional.linear(rows, row_weight, linear.bias)
            if node_terms is not None:
                z = z + node_terms
        if release_node_terms and node_terms is not None and node_terms._base is None:
            node_terms.untyped_storage().resize_(0)
        return mlp_tail(
            self.mlp, z, recompute_elementwise=recompute_elementwise, fused=self.fused,
            residual=rows if self.residual else None, shift=shift, output_read=output_read,
        )  # fmt: skip


class _GatherBothEnds(torch.autograd.Function):
    """:meth:`EdgeMLP.gather` whose backward sums the edges' gradients node by node (both
    halves of the projections in one kernel call) instead of two ``index_add_``."""

    @staticmethod
    def forward(ctx, projections, src, dst, incidence):
        ctx.incidence = incidence
        return EdgeMLP._gather(projections, src, dst)

    @staticmethod
    def backward(ctx, grad_terms):
        by_dst, by_src = sums_by_node(grad_terms.contiguous(), ctx.incidence)
        return torch.cat([by_src, by_dst], dim=1), None, None, None
