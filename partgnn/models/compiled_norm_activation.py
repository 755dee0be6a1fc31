"""The fused LayerNorm and activation where the C++ kernel does not run, by ``torch.compile``.

A GPU step of many small kernels is bound by the host issuing them (issue 49). The element-wise
run of an MLP layer, ``act(LayerNorm(z + shift)) + post``, is about ten kernels forward and
twenty backward op by op, and autograd keeps several ``(M, W)`` tensors for it;
:func:`norm_activation_forward` and :func:`norm_activation_backward` compute the same as the C++
CPU kernel (``kernels/norm_activation.cpp``: the same signatures, statistics recomputed from
``z`` in the backward pass, so only ``z`` is kept) as two operators,
``torch.ops.partgnn_compiled.*``, whose bodies ``torch.compile`` turns into a few fused kernels
(Triton kernels on CUDA, C++ loops on a CPU). Each variant (which of shift, weight, bias and
post are given, the norm, the activation, the dtype, the device) is compiled once, with the
number of rows dynamic: no recompilation per event or chunk. Where it cannot be compiled (no
Triton, no compiler), the variant is computed op by op, after a one-line warning: the same
function, slower.

Computed in float32 for bf16 and float16 rows (float64 for float64), like the C++ kernel; the
gradients of shift, weight and bias in that dtype too.

Glossary: ``z`` rows ``(M, W)`` (any leading shape), the output of a Linear layer without its
bias; ``shift`` that bias ``(W,)``; ``post`` added after the activation, ``z``'s shape.
"""

# No ``from __future__ import annotations``: torch.library reads the operators' annotations.

import types
import warnings
from collections.abc import Callable

import torch
from torch import Tensor

from partgnn.errors import first_line

#: Activations by the operators' ``activation`` code (the C++ kernel's).
IDENTITY, RELU, SILU = 0, 1, 2
#: The devices the operators are registered for (``torch.device.type``).
DEVICES = ("cpu", "cuda")


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _normalised(z, shift, norm: bool, eps: float):
    """``(x, rstd)``: ``z + shift`` in the compute dtype as ``(M, W)`` rows, normalised over
    each row when ``norm`` (``rstd`` ``(M, 1)``, else ``None``)."""
    x = z.to(_compute_dtype(z.dtype)).reshape(-1, z.shape[-1])
    if shift is not None:
        x = x + shift.to(x.dtype)
    if not norm:
        return x, None
    x = x - x.mean(-1, keepdim=True)
    rstd = torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)
    return x * rstd, rstd


def _affine(x, weight, bias):
    if weight is not None:
        x = x * weight.to(x.dtype)
    if bias is not None:
        x = x + bias.to(x.dtype)
    return x


def _forward_rows(z, shift, weight, bias, post, norm: bool, eps: float, activation: int):
    """``act(LayerNorm(z + shift)) + post`` (the forward operator's body)."""
    x, _ = _normalised(z, shift, norm, eps)
    u = _affine(x, weight, bias) if norm else x
    if activation == RELU:
        u = torch.relu(u)
    elif activation == SILU:
        u = u * torch.sigmoid(u)
    if post is not None:
        u = u + post.to(u.dtype).reshape(u.shape)
    return u.to(z.dtype).reshape(z.shape)


def _backward_rows(
    grad_out, z, shift, weight, bias, norm: bool, eps: float, activation: int,
    parameter_grads: bool,
):  # fmt: skip
    """The gradients of ``z`` and, when ``parameter_grads``, of the given shift, weight and
    bias summed over the rows (the backward operator's body; the others: empty tensors)."""
    x, rstd = _normalised(z, shift, norm, eps)
    g = grad_out.to(x.dtype).reshape(x.shape)
    u = _affine(x, weight, bias) if norm else x
    if activation == RELU:
        g = torch.where(u > 0, g, torch.zeros_like(g))
    elif activation == SILU:
        s = torch.sigmoid(u)
        g = g * s * (1 + u * (1 - s))
    grad_weight, grad_bias = x.new_empty(0), x.new_empty(0)  # distinct: outputs never alias
    if norm:
        if parameter_grads and weight is not None:
            grad_weight = (g * x).sum(0)
        if parameter_grads and bias is not None:
            grad_bias = g.sum(0)
        if weight is not None:
            g = g * weight.to(x.dtype)
        g = rstd * (g - g.mean(-1, keepdim=True) - x * (g * x).mean(-1, keepdim=True))
    grad_shift = g.sum(0) if parameter_grads and shift is not None else x.new_empty(0)
    return g.to(z.dtype).reshape(z.shape), grad_shift, grad_weight, grad_bias


_LIBRARY = torch.library.Library("partgnn_compiled", "DEF")
_LIBRARY.define(
    "norm_activation_forward(Tensor z, Tensor? shift, Tensor? weight, Tensor? bias, "
    "Tensor? post, bool norm, float eps, int activation) -> Tensor"
)
_LIBRARY.define(
    "norm_activation_backward(Tensor grad_out, Tensor z, Tensor? shift, Tensor? weight, "
    "Tensor? bias, bool norm, float eps, int activation, bool parameter_grads) "
    "-> (Tensor, Tensor, Tensor, Tensor)"
)
#: The operators, ``torch.ops.partgnn_compiled``: ``norm_activation_forward(z, shift, weight,
#: bias, post, norm, eps, activation)`` returns ``act(LayerNorm(z + shift)) + post`` in ``z``'s
#: dtype; ``norm_activation_backward(grad_out, z, shift, weight, bias, norm, eps, activation,
#: parameter_grads)`` returns ``(grad_z, grad_shift, grad_weight, grad_bias)``, the last three
#: ``(W,)`` in the compute dtype or empty where not given or not wanted (the C++ kernel's
#: operators, whose are undefined there). Registered with the dispatcher directly (not
#: ``torch.library.custom_op``, whose Python checks cost more than the kernels of a small graph).
OPERATORS = torch.ops.partgnn_compiled


def _forward_operator(z, shift, weight, bias, post, norm, eps, activation):
    variant = _variant(_forward_rows, z, (shift, weight, bias, post), (norm, activation))
    return variant(z, shift, weight, bias, post, norm, eps, activation)


def _backward_operator(grad_out, z, shift, weight, bias, norm, eps, activation, parameter_grads):
    flags = (norm, activation, parameter_grads)
    variant = _variant(_backward_rows, z, (shift, weight, bias), flags)
    return variant(grad_out, z, shift, weight, bias, norm, eps, activation, parameter_grads)


def _fake_forward(z, shift, weight, bias, post, norm, eps, activation):
    return torch.empty_like(z)


def _fake_backward(grad_out, z, shift, weight, bias, norm, eps, activation, parameter_grads):
    dtype = _compute_dtype(z.dtype)

    def summed(parameter, of_norm: bool):
        wanted = parameter_grads and parameter is not None and (norm or not of_norm)
        return z.new_empty(z.shape[-1] if wanted else 0, dtype=dtype)

    return torch.empty_like(z), summed(shift, False), summed(weight, True), summed(bias, True)


for _device in DEVICES:
    _LIBRARY.impl("norm_activation_forward", _forward_operator, _device.upper())
    _LIBRARY.impl("norm_activation_backward", _backward_operator, _device.upper())
torch.library.register_fake("partgnn_compiled::norm_activation_forward", _fake_forward)
torch.library.register_fake("partgnn_compiled::norm_activation_backward", _fake_backward)


class _Variant:
    """One variant of a body: compiled the first time it is called (its rows dynamic), computed
    op by op after a warning where it cannot be compiled."""

    def __init__(self, body: Callable, number: int, device: str) -> None:
        # Each variant gets its own copy of the body's code: dynamo counts a function's
        # compiled variants against its recompile limit (8), past which it would silently run
        # it op by op.
        own = types.FunctionType(
            body.__code__.replace(co_name=f"{body.__name__}_{number}"), body.__globals__
        )
        self.body, self.device = body, device
        self.compiled: Callable | None = torch.compile(own, fullgraph=True)

    def __call__(self, *args):
        if self.compiled is None:
            return self.body(*args)
        # Plain tensors: dynamo's guards tell a Parameter from a tensor and one requires_grad
        # from another (each would be a graph of its own); the operators run below autograd.
        # Rows dynamic (marked on each call's tensors: a mark lives on the tensor object).
        args = tuple(_plain_rows(a) if isinstance(a, Tensor) else a for a in args)
        try:
            # One dispatch state for every call (the operator is reached with autograd's keys
            # excluded or not, and dynamo's guards check them).
            with torch._C._AutoDispatchBelowADInplaceOrView():
                return self.compiled(*args)
        except Exception as err:  # any compiler failure: the same function, op by op
            self.compiled = None
            warnings.warn(
                f"model.fused: torch.compile cannot compile the fused LayerNorm + activation on "
                f"{self.device} ({first_line(err)}); computing it op by op", stacklevel=2,
            )  # fmt: skip
            return self.body(*args)


def _plain_rows(tensor: Tensor) -> Tensor:
    """``tensor`` detached, its rows (first dimension) dynamic for dynamo where it has rows."""
    tensor = tensor.detach()
    if tensor.dim() > 1:
        torch._dynamo.maybe_mark_dynamic(tensor, 0)
    return tensor


#: The variants by body, device, dtype, which optional inputs are given, the flags and
#: whether autocast is on.
_VARIANTS: dict[tuple, _Variant] = {}


def _variant(body: Callable, z: Tensor, optional: tuple, flags: tuple) -> _Variant:
    device = z.device.type
    given = tuple(t is None for t in optional)
    # Autocast on or off: dynamo guards on it (the bodies cast explicitly either way).
    key = (body, device, z.dtype, given, flags, torch.is_autocast_enabled(device))
    variant = _VARIANTS.get(key)
    if variant is None:
        variant = _VARIANTS[key] = _Variant(body, len(_VARIANTS), device)
    return variant


def variant_counts() -> tuple[int, int]:
    """``(compiled, op_by_op)``: how many variants this process has compiled and how many it
    computes op by op because they could not be compiled."""
    op_by_op = sum(variant.compiled is None for variant in _VARIANTS.values())
    return len(_VARIANTS) - op_by_op, op_by_op
