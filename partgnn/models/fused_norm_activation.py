"""LayerNorm and activation fused into one pass over the rows (``model.fused``).

An MLP layer of the Interaction Network is ``act(LayerNorm(z))`` after a Linear layer, where
``z`` is an ``E x H`` matrix; with ``H = 64`` the element-wise work per row (two row
reductions, an exponential per value) costs about as much as the 64 x 64 matmul before it, and
done op by op it is one pass through memory per operation (add, LayerNorm, SiLU, residual add,
and their gradients), one kernel launch each on a GPU. :func:`norm_activation` computes
``act(LayerNorm(z + shift)) + post`` in one operator forward and one backward, whose backward
pass recomputes the row's statistics and activation from ``z``: it keeps only ``z``, as
:func:`~partgnn.models.lean_mlp.mlp_tail`'s ``recompute_elementwise`` does. The gradients of the
bias and the LayerNorm parameters are summed in float32 (float64 for float64 rows), also for
bf16 rows. On a CPU the operators are a C++ kernel that computes row by row while each row sits
in registers (``kernels/norm_activation.cpp``, vectorised with ATen's ``at::vec`` for the CPU's
instruction set); on other devices (CUDA) the same function compiled by ``torch.compile``
(:mod:`~partgnn.models.compiled_norm_activation`; :mod:`~partgnn.models.kernel_choice` says
which).

The C++ kernel is compiled the first time it is used and cached
(:mod:`~partgnn.models.cpu_kernels`); a run with ``model.fused: false`` never builds it. CPU rows
wider than the kernel's registers and other modules take the plain path (the same function, op
by op).

Glossary: ``z`` rows ``(M, W)``, the output of a Linear layer without its bias; ``shift`` that
bias ``(W,)``, added before the norm (so the matmul writes its output once instead of first
copying the bias into every row); ``post`` added after the activation ``(M, W)``.
"""

from __future__ import annotations

import torch
from torch import nn

from partgnn.models.compiled_norm_activation import DEVICES as COMPILED_DEVICES
from partgnn.models.compiled_norm_activation import OPERATORS as COMPILED_OPERATORS
from partgnn.models.cpu_kernels import load_kernels
from partgnn.models.kernel_choice import cpp_kernels_on

#: Activations the kernel computes, by module type (its ``int activation`` argument).
KERNEL_ACTIVATIONS: dict[type[nn.Module], int] = {nn.ReLU: 1, nn.SiLU: 2}
#: The widest row the kernel holds in registers (16 vectors of 16 float32 / 8 float64 lanes).
MAX_KERNEL_WIDTH = {torch.float64: 128}
MAX_KERNEL_WIDTH_DEFAULT = 256


def fusable(modules: list[nn.Module]) -> bool:
    """Whether a run of element-wise modules is ``[LayerNorm?, activation?]`` the kernel
    computes (a LayerNorm over the last dimension, ReLU or SiLU)."""
    rest = list(modules)
    if rest and isinstance(rest[0], nn.LayerNorm):
        if len(rest[0].normalized_shape) != 1:
            return False
        rest = rest[1:]
    if rest and type(rest[0]) in KERNEL_ACTIVATIONS:
        rest = rest[1:]
    return not rest and bool(modules)


def kernel_applies(z: torch.Tensor, post: torch.Tensor | None = None) -> bool:
    """Whether the fused operators compute rows ``z`` (and ``post`` of their shape and dtype):
    float64, float32 or bf16 rows on a CPU (the C++ kernel: no wider than its registers hold)
    or on CUDA (compiled)."""
    width = z.shape[-1] if z.dim() else 0
    if cpp_kernels_on(z.device):
        limit = MAX_KERNEL_WIDTH.get(z.dtype, MAX_KERNEL_WIDTH_DEFAULT)
    elif z.device.type in COMPILED_DEVICES:
        limit = width
    else:
        return False
    return (
        z.dtype in (torch.float64, torch.float32, torch.bfloat16)
        and 0 < width <= limit
        and (post is None or (post.dtype == z.dtype and post.shape == z.shape))
    )


def norm_activation(
    z: torch.Tensor,
    modules: list[nn.Module],
    *,
    shift: torch.Tensor | None = None,
    post: torch.Tensor | None = None,
    values: bool = True,
) -> torch.Tensor:
    """``modules(z + shift) + post`` in one pass per row, for a :func:`fusable` run of modules
    and rows the kernel computes (:func:`kernel_applies`).

    Args:
        z: Rows ``(M, W)``.
        modules: ``[LayerNorm?, activation?]``.
        shift: A row ``(W,)`` added to every row first: the bias of the Linear layer before,
            so that layer's matmul writes its output once (``None``: nothing).
        post: Added after the modules (``None``: nothing).
        values: ``False`` where only the result's autograd graph is used (a backward pass's
            recomputation): the forward kernel is not run and the result's values are unset.

    Returns:
        ``(M, W)`` in ``z``'s dtype.
    """
    if not (fusable(modules) and kernel_applies(z, post)):
        raise ValueError(f"norm_activation: the kernel does not compute {modules} on {z.dtype} "
                         f"{z.device.type} rows of {tuple(z.shape)}")  # fmt: skip
    if shift is not None and shift.shape != z.shape[-1:]:
        raise ValueError(f"norm_activation: shift of shape {tuple(shift.shape)} for rows of "
                         f"{z.shape[-1]}")  # fmt: skip
    norm = modules[0] if isinstance(modules[0], nn.LayerNorm) else None
    activation = modules[-1] if type(modules[-1]) in KERNEL_ACTIVATIONS else None
    weight = bias = None
    eps = 0.0
    if norm is not None:
        weight, bias, eps = norm.weight, norm.bias, norm.eps
    code = 0 if activation is None else KERNEL_ACTIVATIONS[type(activation)]
    return _NormActivation.apply(z, shift, weight, bias, post, norm is not None, eps, code, values)


def _operators(z: torch.Tensor):
    """The operators for rows ``z``: the C++ kernel's (built or loaded now) or the compiled."""
    if cpp_kernels_on(z.device):
        load_kernels()
        return torch.ops.partgnn
    return COMPILED_OPERATORS


class _NormActivation(torch.autograd.Function):
    """The operators' forward and backward pass (keeps ``z``, recomputes the rest)."""

    @staticmethod
    def forward(ctx, z, shift, weight, bias, post, norm, eps, activation, values):
        ctx.save_for_backward(z, shift, weight, bias)
        ctx.settings = (norm, eps, activation)
        ctx.operators = _operators(z)
        if not values:  # only the graph is wanted (the backward needs z alone)
            return torch.empty_like(z)
        return ctx.operators.norm_activation_forward(
            z, shift, weight, bias, post, norm, eps, activation
        )

    @staticmethod
    def backward(ctx, grad_out):
        z, shift, weight, bias = ctx.saved_tensors
        wanted = ctx.needs_input_grad
        grad_z, grad_shift, grad_weight, grad_bias = ctx.operators.norm_activation_backward(
            grad_out.contiguous(), z, shift, weight, bias, *ctx.settings, any(wanted[1:4])
        )
        return (
            grad_z if wanted[0] else None,
            _as(grad_shift, shift) if wanted[1] else None,
            _as(grad_weight, weight) if wanted[2] else None,
            _as(grad_bias, bias) if wanted[3] else None,
            grad_out if wanted[4] else None,
            None,
            None,
            None,
            None,
        )


def _as(grad: torch.Tensor, parameter: torch.Tensor) -> torch.Tensor:
    return grad.to(parameter.dtype)
