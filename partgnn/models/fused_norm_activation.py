"""LayerNorm and activation fused into one pass over the rows, on CPUs (``model.fused``).

An MLP layer of the Interaction Network is ``act(LayerNorm(z))`` after a Linear layer, where
``z`` is an ``E x H`` matrix; with ``H = 64`` the element-wise work per row (two row
reductions, an exponential per value) costs about as much as the 64 x 64 matmul before it, and
done op by op it is one pass through memory per operation (add, LayerNorm, SiLU, residual add,
and their gradients). :func:`norm_activation` computes ``act(LayerNorm(z + shift)) + post`` row
by row while each row sits in registers (the C++ kernel in ``kernels/norm_activation.cpp``,
vectorised with ATen's ``at::vec`` for the CPU's instruction set), and its backward pass
recomputes the row's statistics and activation from ``z``: it keeps only ``z``, as
:func:`~partgnn.models.lean_mlp.mlp_tail`'s ``recompute_elementwise`` does. The gradients of the
bias and the LayerNorm parameters are summed in float32 (float64 for float64 rows), also for
bf16 rows.

The kernel is compiled the first time it is used (with the compiler torch's C++ extensions
use, about 10-20 s) and cached (``TORCH_EXTENSIONS_DIR``, by default
``~/.cache/torch_extensions``); a run with ``model.fused: false`` never builds it. GPU tensors,
rows wider than the kernel's registers and other modules take the plain path (the same
function, op by op).

Glossary: ``z`` rows ``(M, W)``, the output of a Linear layer without its bias; ``shift`` that
bias ``(W,)``, added before the norm (so the matmul writes its output once instead of first
copying the bias into every row); ``post`` added after the activation ``(M, W)``.
"""

from __future__ import annotations

import hashlib
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


def kernel_applies(z: torch.Tensor, post: torch.Tensor | None = None) -> bool:
    """Whether the kernel computes rows ``z`` (and ``post`` of their shape and dtype): CPU
    tensors of float64, float32 or bf16 no wider than its registers hold."""
    width = z.shape[-1] if z.dim() else 0
    limit = MAX_KERNEL_WIDTH.get(z.dtype, MAX_KERNEL_WIDTH_DEFAULT)
    return (
        z.device.type == "cpu"
        and z.dtype in (torch.float64, torch.float32, torch.bfloat16)
        and 0 < width <= limit
        and (post is None or (post.dtype == z.dtype and post.shape == z.shape))
    )


def norm_activation(
    z: torch.Tensor,
    modules: list[nn.Module],
    *,
    shift: torch.Tensor | None = None,
    post: torch.Tensor | None = None,
) -> torch.Tensor:
    """``modules(z + shift) + post`` in one pass per row, for a :func:`fusable` run of modules
    and rows the kernel computes (:func:`kernel_applies`).

    Args:
        z: Rows ``(M, W)``.
        modules: ``[LayerNorm?, activation?]``.
        shift: A row ``(W,)`` added to every row first: the bias of the Linear layer before,
            so that layer's matmul writes its output once (``None``: nothing).
        post: Added after the modules (``None``: nothing).

    Returns:
        ``(M, W)`` in ``z``'s dtype.
    """
    if not (fusable(modules) and kernel_applies(z, post)):
        raise ValueError(f"norm_activation: the kernel does not compute {modules} on {z.dtype} "
                         f"{z.device.type} rows of {tuple(z.shape)}")  # fmt: skip
    if shift is not None and shift.shape != z.shape[-1:]:
        raise ValueError(f"norm_activation: shift of shape {tuple(shift.shape)} for rows of "
                         f"{z.shape[-1]}")  # fmt: skip
    load_kernel()
    norm = modules[0] if isinstance(modules[0], nn.LayerNorm) else None
    activation = modules[-1] if type(modules[-1]) in KERNEL_ACTIVATIONS else None
    weight = bias = None
    eps = 0.0
    if norm is not None:
        weight, bias, eps = norm.weight, norm.bias, norm.eps
    code = 0 if activation is None else KERNEL_ACTIVATIONS[type(activation)]
    return _NormActivation.apply(z, shift, weight, bias, post, norm is not None, eps, code)


class _NormActivation(torch.autograd.Function):
    """The kernel's forward and backward pass (keeps ``z``, recomputes the rest)."""

    @staticmethod
    def forward(ctx, z, shift, weight, bias, post, norm, eps, activation):
        ctx.save_for_backward(z, shift, weight, bias)
        ctx.settings = (norm, eps, activation)
        return torch.ops.partgnn.norm_activation_forward(
            z, shift, weight, bias, post, norm, eps, activation
        )

    @staticmethod
    def backward(ctx, grad_out):
        z, shift, weight, bias = ctx.saved_tensors
        wanted = ctx.needs_input_grad
        grad_z, grad_shift, grad_weight, grad_bias = torch.ops.partgnn.norm_activation_backward(
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

    flags = ["-O3", "-fopenmp"]
    capability = torch.backends.cpu.get_cpu_capability()
    if capability in _CAPABILITY_FLAGS:
        flags += [*_CAPABILITY_FLAGS[capability], f"-DCPU_CAPABILITY={capability}"]
    started = time.perf_counter()
    try:
        # The source, flags and torch installation in the name: each version of the kernel and
        # each environment (whose torch headers the build reads) builds once in its own folder
        # (ninja alone compares file times, which a copy or an install can leave misleading).
        source = _SOURCE.read_bytes()
        build_inputs = [*flags, torch.__version__, str(Path(torch.__file__).parent)]
        digest = hashlib.sha256(source + " ".join(build_inputs).encode()).hexdigest()
        name = f"partgnn_norm_activation_{capability.lower()}_{digest[:12]}"
        cpp_extension.load(
            name=name,
            sources=[str(_cached_source(cpp_extension._get_build_directory(name, False), source))],
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


def _cached_source(build_directory: str, source: bytes) -> Path:
    """The kernel's source, copied once into its build folder: ninja's build rule names the
    source's path, so every checkout or environment that builds from there reuses one build."""
    path = Path(build_directory) / _SOURCE.name
    if not path.exists():
        partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        partial.write_bytes(source)
        os.replace(partial, path)
    return path
