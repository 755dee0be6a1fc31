"""The compiled LayerNorm + activation (the GPU's fused path) against the plain modules, on the
CPU (inductor's C++ code; Triton on a GPU compiles the same bodies)."""

from __future__ import annotations

import warnings

import pytest
import torch

from partgnn.models import compiled_norm_activation
from partgnn.models.compiled_norm_activation import OPERATORS, variant_counts
from partgnn.models.cpu_kernels import load_kernels
from partgnn.models.fused_norm_activation import kernel_applies, norm_activation
from partgnn.models.kernel_choice import cpp_kernels_on, gpu_kernel_paths
from tests.models.norm_activation_cases import float64_case
from tests.models.norm_activation_cases import modules as _modules
from tests.models.norm_activation_cases import plain as _plain


@pytest.mark.parametrize(
    ("kind", "addends"), [("norm_silu", "both"), ("norm_relu", "shift"), ("silu", "post")]
)
def test_float64_values_and_gradients_equal_the_plain_modules(kind, addends):
    torch.manual_seed(0)
    width = 24  # not a power of two
    modules = [m.double() for m in _modules(kind, width)]
    z, shift, post, grad_out, inputs = float64_case(modules, 37, width, addends)

    with gpu_kernel_paths():
        assert not cpp_kernels_on(z.device)
        fused = norm_activation(z, modules, shift=shift, post=post)
        got_grads = torch.autograd.grad(fused, inputs, grad_out)
    assert fused.grad_fn.name() == "_NormActivationBackward"
    plain = _plain(z, modules, shift, post)
    torch.testing.assert_close(fused, plain, rtol=1e-12, atol=1e-12)
    want_grads = torch.autograd.grad(plain, inputs, grad_out)
    for got, want in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_the_operators_equal_the_cpp_kernels_in_bf16():
    """bf16 rows computed in float32 like the C++ kernel: the same values to one bf16 rounding,
    parameter gradients in float32."""
    load_kernels()
    torch.manual_seed(1)
    z = torch.randn(300, 64).bfloat16()
    grad_out = torch.randn(300, 64).bfloat16()
    shift, weight, bias = torch.randn(64), torch.rand(64) + 0.5, torch.randn(64)
    args = (shift, weight, bias)
    for ops in (OPERATORS, torch.ops.partgnn):
        assert ops.norm_activation_forward(z, *args, None, True, 1e-5, 2).dtype == torch.bfloat16
    compiled = OPERATORS.norm_activation_forward(z, *args, None, True, 1e-5, 2)
    cpp = torch.ops.partgnn.norm_activation_forward(z, *args, None, True, 1e-5, 2)
    torch.testing.assert_close(compiled.float(), cpp.float(), rtol=1e-2, atol=1e-2)
    compiled = OPERATORS.norm_activation_backward(grad_out, z, *args, True, 1e-5, 2, True)
    cpp = torch.ops.partgnn.norm_activation_backward(grad_out, z, *args, True, 1e-5, 2, True)
    torch.testing.assert_close(compiled[0].float(), cpp[0].float(), rtol=2e-2, atol=2e-2)
    for got, want in zip(compiled[1:], cpp[1:], strict=True):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)


def test_row_counts_are_dynamic_not_one_compilation_per_count(monkeypatch):
    """Events and chunks of any number of edges reuse a variant's graphs (at most one more
    where inductor splits its loops at a size), instead of one compilation each."""
    monkeypatch.setattr(compiled_norm_activation, "_VARIANTS", {})
    graphs = torch._dynamo.utils.counters["stats"]
    shift = torch.randn(16, dtype=torch.float64)
    before = graphs["unique_graphs"]
    for rows in (5, 37, 300, 1000, 5000, 9000, 12_345):
        z = torch.randn(rows, 16, dtype=torch.float64)
        OPERATORS.norm_activation_forward(z, shift, None, None, None, True, 1e-5, 2)
    assert graphs["unique_graphs"] - before <= 2
    assert variant_counts() == (1, 0)


def test_a_variant_that_cannot_be_compiled_warns_once_and_computes_op_by_op(monkeypatch):
    monkeypatch.setattr(compiled_norm_activation, "_VARIANTS", {})

    def no_compiler(function, **_):
        def fail(*args):
            raise RuntimeError("Cannot find a working triton installation\nmore lines")

        return fail

    monkeypatch.setattr(torch, "compile", no_compiler)
    modules = [m.double() for m in _modules("norm_silu", 8)]
    z = torch.randn(6, 8, dtype=torch.float64)
    with gpu_kernel_paths():
        with pytest.warns(UserWarning, match=r"model\.fused: torch\.compile cannot compile.*"
                          r"working triton installation\); computing it op by op$"):  # fmt: skip
            first = norm_activation(z, modules)
        with warnings.catch_warnings(record=True) as later:
            warnings.simplefilter("always")
            second = norm_activation(z, modules)
    assert not later
    torch.testing.assert_close(first, _plain(z, modules, None, None), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(second, first)
    assert variant_counts() == (0, 1)


def test_cuda_rows_take_the_compiled_path_and_other_devices_none():
    assert not cpp_kernels_on(torch.device("cuda"))
    meta = torch.empty(4, 8, device="meta")
    assert not kernel_applies(meta)
    with gpu_kernel_paths():
        assert kernel_applies(torch.zeros(4, 300))  # no register limit when compiled
        assert not kernel_applies(torch.zeros(4, 8, dtype=torch.float16))
    assert cpp_kernels_on(torch.device("cpu"))
