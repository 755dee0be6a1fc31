"""LayerNorm and activation fused into one pass over the rows, on CPUs (``model.fused``).

An MLP layer of the Interaction Network is ``act(LayerNorm(z))`` after a Linear layer, where
``z`` is an ``E x H`` matrix; with ``H = 64`` the element-wise work per row (two row
reductions, an exponential per value) costs about as much as the 64 x 64 matmul before it, and
done op by op it is one pass through memory per operation (add, LayerNorm, SiLU, residual add,
and their gradients). :func:`norm_activation` computes ``act(LayerNorm(z + pre)) + post`` row
by row while each row sits in registers (the C++ kernel in ``kernels/norm_activation.cpp``,
vectorised with ATen's ``at::vec`` for the CPU's instruction set), and its backward pass
recomputes the row's statistics and activation from ``z``: it keeps only ``z`` (and ``pre``),
as :func:`~partgnn.models.lean_mlp.mlp_tail`'s ``recompute_elementwise`` does. The LayerNorm
parameters' gradients are summed in float32 (float64 for float64 rows), also for bf16 rows.

The kernel is compiled the first time it is used (with the compiler torch's C++ extensions
use, about 10-20 s) and cached (``TORCH_EXTENSIONS_DIR``, by default
``~/.cache/torch_extensions``); a run with ``model.fused: false`` never builds it. GPU tensors,
rows wider than the kernel's registers and other modules take the plain path (the same
function, op by op).

Glossary: ``z`` rows ``(M, H)``; ``pre`` added before the norm, ``post`` after the activation
(both ``(M, H)`` in ``z``'s dtype).
"""

from __future__ import annotations

import os
import time
from functools import cache
from pathlib import Path

import torch
from torch import nn

from partgnn.errors import InputError, first_line

#: Activations the kernel computes, by module type (its ``int activation`` argument).
KERNEL_ACTIVATIONS: dict[type[nn.Module], int] = {nn.ReLU: 1, nn.SiLU: 2}
#: The widest row the kernel holds in registers (16 vectors of 16 float32 / 8 float64 lanes).
MAX_KERNEL_WIDTH = {torch.float64: 128}
MAX_KERNEL_WIDTH_DEFAULT = 256

_SOURCE = Path(__file__).parent / "kernels" / "norm_activation.cpp"
# Instruction-set flags for ATen's vector types, by torch's CPU capability.
_CAPABILITY_FLAGS = {
    "AVX512": ["-DCPU_CAPABILITY_AVX512", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq",
               "-mfma"],
    "AVX2": ["-DCPU_CAPABILITY_AVX2", "-mavx2", "-mfma", "-mf16c"],
}  # fmt: skip


class KernelBuild:
    """How the kernel was obtained in this process: ``seconds`` to compile or load it."""

    seconds: float | None = None


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


def kernel_applies(z: torch.Tensor, *others: torch.Tensor | None) -> bool:
    """Whether the kernel computes rows ``z`` (and the same-shaped ``others``): CPU tensors of
    float64, float32 or bf16 no wider than its registers hold."""
    width = z.shape[-1] if z.dim() else 0
    limit = MAX_KERNEL_WIDTH.get(z.dtype, MAX_KERNEL_WIDTH_DEFAULT)
    return (
        z.device.type == "cpu"
        and z.dtype in (torch.float64, torch.float32, torch.bfloat16)
        and 0 < width <= limit
        and all(t is None or (t.dtype == z.dtype and t.shape == z.shape) for t in others)
    )


def norm_activation(
    z: torch.Tensor,
    modules: list[nn.Module],
    *,
    pre: torch.Tensor | None = None,
    post: torch.Tensor | None = None,
) -> torch.Tensor:
    """``modules(z + pre) + post`` in one pass per row, for a :func:`fusable` run of modules
    and rows the kernel computes (:func:`kernel_applies`).

    Args:
        z: Rows ``(M, H)``.
        modules: ``[LayerNorm?, activation?]``.
        pre: Added to ``z`` before the modules (``None``: nothing).
        post: Added after them (``None``: nothing).

    Returns:
        ``(M, H)`` in ``z``'s dtype.
    """
    if not (fusable(modules) and kernel_applies(z, pre, post)):
        raise ValueError(f"norm_activation: the kernel does not compute {modules} on {z.dtype} "
                         f"{z.device.type} rows of {tuple(z.shape)}")  # fmt: skip
    load_kernel()
    norm = modules[0] if isinstance(modules[0], nn.LayerNorm) else None
    activation = modules[-1] if type(modules[-1]) in KERNEL_ACTIVATIONS else None
    weight = bias = None
    eps = 0.0
    if norm is not None:
        weight, bias, eps = norm.weight, norm.bias, norm.eps
    code = 0 if activation is None else KERNEL_ACTIVATIONS[type(activation)]
    return _NormActivation.apply(z, pre, weight, bias, post, norm is not None, eps, code)


class _NormActivation(torch.autograd.Function):
    """The kernel's forward and backward pass (keeps ``z`` and ``pre``, recomputes the rest)."""

    @staticmethod
    def forward(ctx, z, pre, weight, bias, post, norm, eps, activation):
        ctx.save_for_backward(z, pre, weight, bias)
        ctx.settings = (norm, eps, activation)
        return torch.ops.partgnn.norm_activation_forward(
            z, pre, weight, bias, post, norm, eps, activation
        )

    @staticmethod
    def backward(ctx, grad_out):
        z, pre, weight, bias = ctx.saved_tensors
        norm, eps, activation = ctx.settings
        affine = ctx.needs_input_grad[2] or ctx.needs_input_grad[3]
        grad_z, grad_weight, grad_bias = torch.ops.partgnn.norm_activation_backward(
            grad_out.contiguous(), z, pre, weight, bias, norm, eps, activation, affine
        )
        return (
            grad_z if ctx.needs_input_grad[0] else None,
            grad_z if ctx.needs_input_grad[1] else None,
            _as(grad_weight, weight) if ctx.needs_input_grad[2] else None,
            _as(grad_bias, bias) if ctx.needs_input_grad[3] else None,
            grad_out if ctx.needs_input_grad[4] else None,
            None,
            None,
            None,
        )


def _as(grad: torch.Tensor, parameter: torch.Tensor) -> torch.Tensor:
    return grad.to(parameter.dtype)


@cache
def load_kernel() -> None:
    """Compiles (first time on this machine) or loads the kernel into ``torch.ops.partgnn``.

    Raises:
        InputError: It cannot be built (no C++ compiler, ...): one line that says to set
            ``model.fused: false``.
    """
    from torch.utils import cpp_extension

    flags = ["-O3", "-fopenmp", "-std=c++17"]
    capability = torch.backends.cpu.get_cpu_capability()
    if capability in _CAPABILITY_FLAGS:
        flags += [*_CAPABILITY_FLAGS[capability], f"-DCPU_CAPABILITY={capability}"]
    started = time.perf_counter()
    try:
        cpp_extension.load(
            name=f"partgnn_norm_activation_{capability.lower()}",
            sources=[str(_SOURCE)],
            extra_cflags=flags,
            extra_ldflags=["-fopenmp"],
            is_python_module=False,
            verbose=bool(os.environ.get("PARTGNN_VERBOSE_BUILD")),
        )
    except (OSError, RuntimeError, ImportError) as err:
        raise InputError(
            f"model.fused: cannot build the fused LayerNorm kernel {_SOURCE.name} "
            f"({first_line(err)}); install a C++ compiler or set model.fused: false"
        ) from None
    KernelBuild.seconds = time.perf_counter() - started
