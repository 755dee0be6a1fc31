"""The fused LayerNorm + activation kernel against the same modules op by op."""

from __future__ import annotations

from contextlib import nullcontext

import pytest
import torch
from torch import nn

from partgnn.errors import InputError
from partgnn.models import chunk_size, cpu_kernels, fused_norm_activation
from partgnn.models.compute_policy import ComputePolicy
from partgnn.models.cpu_kernels import load_kernels
from partgnn.models.fused_norm_activation import fusable, kernel_applies, norm_activation
from partgnn.models.interaction_network import InteractionNetwork
from partgnn.models.kernel_choice import gpu_kernel_paths
from partgnn.models.lean_mlp import mlp_tail
from partgnn.models.mlp import make_mlp
from tests.models.norm_activation_cases import float64_case
from tests.models.norm_activation_cases import modules as _modules
from tests.models.norm_activation_cases import plain as _plain

# A row of 64 values is the fixed-width path (4 float32 / 8 float64 vectors); 20 is the
# any-width path with a partial last vector.
WIDTHS = (64, 20)


@pytest.mark.parametrize("kind", ["norm_silu", "norm_relu", "norm", "silu"])
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("addends", ["none", "shift", "post", "both"])
def test_float64_values_and_gradients_equal_the_plain_modules(kind, width, addends):
    torch.manual_seed(0)
    modules = [m.double() for m in _modules(kind, width)]
    # rows: not a multiple of a thread's share
    z, shift, post, grad_out, inputs = float64_case(modules, 37, width, addends)

    fused = norm_activation(z, modules, shift=shift, post=post)
    plain = _plain(z, modules, shift, post)
    torch.testing.assert_close(fused, plain, rtol=1e-12, atol=1e-12)
    for got, want in zip(
        torch.autograd.grad(fused, inputs, grad_out),
        torch.autograd.grad(plain, inputs, grad_out),
        strict=True,
    ):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_gradcheck_of_norm_silu_with_shift_and_post():
    torch.manual_seed(1)
    modules = [m.double() for m in _modules("norm_silu", 20)]
    shapes = [(6, 20), (20,), (6, 20)]
    tensors = [torch.randn(s, dtype=torch.float64, requires_grad=True) for s in shapes]

    def fn(z, shift, post):
        return norm_activation(z, modules, shift=shift, post=post)

    assert torch.autograd.gradcheck(fn, tensors)


def test_bf16_rows_compute_in_float32_with_float32_parameter_gradients():
    """bf16 rows (the rounding of bf16 only on what is stored): closer to float64 than the
    plain modules under autocast, whose LayerNorm parameter gradients come out of bf16 sums."""
    torch.manual_seed(2)
    modules = _modules("norm_silu", 64)
    z64 = torch.randn(4096, 64, dtype=torch.float64)
    grad64 = torch.randn(4096, 64, dtype=torch.float64)
    z, grad_out = z64.bfloat16().requires_grad_(), grad64.bfloat16()
    norm = modules[0]

    out = norm_activation(z, modules)
    assert out.dtype == torch.bfloat16
    got = torch.autograd.grad(out, [z, norm.weight, norm.bias], grad_out)
    assert got[1].dtype == torch.float32

    reference = [m.double() for m in _modules("norm_silu", 64)]
    reference[0].load_state_dict({k: v.double() for k, v in norm.state_dict().items()})
    z_ref = z.detach().double().requires_grad_()
    out_ref = _plain(z_ref, reference, None, None)
    want = torch.autograd.grad(
        out_ref, [z_ref, reference[0].weight, reference[0].bias], grad_out.double()
    )
    assert (out.double() - out_ref).abs().max() <= 0.02
    for g, w in zip(got, want, strict=True):
        assert (g.double() - w).abs().max() / w.abs().max() <= 0.01


def test_fusable_runs():
    assert fusable([nn.LayerNorm(8), nn.SiLU()])
    assert fusable([nn.LayerNorm(8), nn.ReLU()])
    assert fusable([nn.LayerNorm(8)])
    assert fusable([nn.ReLU()])
    assert not fusable([])
    assert not fusable([nn.LayerNorm(8), nn.Tanh()])
    assert not fusable([nn.LayerNorm((2, 4)), nn.SiLU()])
    assert not fusable([nn.SiLU(), nn.LayerNorm(8)])


def test_what_the_kernel_does_not_compute_is_refused_or_left_to_the_plain_path():
    meta = torch.empty(4, 8, device="meta")
    assert not kernel_applies(meta)
    assert not kernel_applies(torch.zeros(4, 8, dtype=torch.float16))
    assert not kernel_applies(torch.zeros(4, 257))
    assert not kernel_applies(torch.zeros(4, 8), torch.zeros(4, 9))
    assert kernel_applies(torch.zeros(4, 256), torch.zeros(4, 256))
    with pytest.raises(ValueError, match="does not compute"):
        norm_activation(torch.zeros(4, 300), [nn.LayerNorm(300)])
    with pytest.raises(ValueError, match="shift of shape"):
        norm_activation(torch.zeros(4, 8), [nn.LayerNorm(8)], shift=torch.zeros(4, 8))
    # mlp_tail falls back to the plain modules for what the kernel does not compute.
    mlp = make_mlp(8, 8, 8, activation="tanh")
    z = torch.randn(5, 8)
    torch.testing.assert_close(mlp_tail(mlp, z, fused=True), mlp_tail(mlp, z))


def test_a_kernel_that_cannot_be_built_is_one_line_naming_the_setting(monkeypatch, tmp_path):
    from torch.utils import cpp_extension

    def no_compiler(**_):
        raise RuntimeError("Error building extension 'x': c++: not found\nmore lines")

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))  # nothing built there
    monkeypatch.setattr(cpp_extension, "load", no_compiler)
    with pytest.raises(InputError, match=r"set model\.fused: false") as err:
        cpu_kernels.load_kernels.__wrapped__()
    assert "\n" not in str(err.value)


def test_a_finished_build_is_loaded_by_another_environment_without_building(monkeypatch):
    """A build is shared by every environment with the same torch build (a new virtual
    environment, a clean clone's) and loaded as it is: not through ninja, whose build file names
    the include folders of the environment that wrote it."""
    from torch.utils import cpp_extension

    load_kernels()  # built (first time on this machine) or loaded

    def no_build(**_):
        raise AssertionError("built again")

    monkeypatch.setattr(cpp_extension, "load", no_build)
    monkeypatch.setattr(torch, "__file__", "/another/environment/torch/__init__.py")
    cpu_kernels.load_kernels.__wrapped__()


@pytest.mark.parametrize("checkpoint", [False, True])
def test_interaction_network_fused_equals_plain_in_float64(checkpoint):
    """The whole model: logits and every gradient, with and without checkpointing (bias of the
    first edge-MLP layer moved into the node projections, residuals fused)."""
    load_kernels()
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(300, 3, generator=generator, dtype=torch.float64)
    edge_index = torch.randint(0, 300, (2, 2000), generator=generator)
    edge_attr = torch.randn(2000, 4, generator=generator, dtype=torch.float64)
    results = []
    for fused in (False, True):
        torch.manual_seed(4)
        model = InteractionNetwork(
            node_features=3, edge_features=4, hidden=32, steps=3, activation="silu",
            aggregation="sum_max", compute=ComputePolicy(recompute=checkpoint, fused=fused),
        ).double()  # fmt: skip
        logits = model(x, edge_index, edge_attr)
        grads = torch.autograd.grad(logits.square().sum(), list(model.parameters()))
        results.append((logits, grads))
    (plain, plain_grads), (fused, fused_grads) = results
    torch.testing.assert_close(fused, plain, rtol=1e-10, atol=1e-12)
    for got, want in zip(fused_grads, plain_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("paths", ["cpp", "compiled"])
@pytest.mark.parametrize("chunks", ["one", "eight"])
def test_a_backward_recomputation_runs_no_last_norm_activation_forward(monkeypatch, paths, chunks):
    """Issue 49: where an edge MLP is recomputed in its backward pass, its output's values are
    never read (only its graph): the last fused LayerNorm + activation records its graph
    without running the forward kernel. The gradients are those of the plain model (float64);
    the forward kernel is skipped once per recomputed chunk: every edge MLP's chunks (8 per
    MLP) where they run in chunks, else the first edge MLP of each region of 2 steps (the
    region's last keeps its recomputed graph)."""
    if chunks == "eight":
        monkeypatch.setattr(chunk_size, "MIN_CHUNK_EDGES", 128)  # 900 edges: 8 chunks
    skipped = []
    forward = fused_norm_activation._NormActivation.forward

    def counting(ctx, *args):
        if not args[-1]:
            skipped.append(args[0].shape[0])
        return forward(ctx, *args)

    monkeypatch.setattr(fused_norm_activation._NormActivation, "forward", staticmethod(counting))
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(60, 3, generator=generator, dtype=torch.float64)
    edge_index = torch.randint(0, 60, (2, 900), generator=generator)
    edge_attr = torch.randn(900, 4, generator=generator, dtype=torch.float64)
    steps = 4
    chunk_bytes = 10**9 if chunks == "one" else None
    results = []
    with gpu_kernel_paths() if paths == "compiled" else nullcontext():
        for fused in (False, True):
            torch.manual_seed(6)
            model = InteractionNetwork(
                node_features=3, edge_features=4, hidden=16, steps=steps, activation="silu",
                compute=ComputePolicy(recompute=True, fused=fused, chunk_bytes=chunk_bytes),
            ).double()  # fmt: skip
            logits = model(x, edge_index, edge_attr)
            results.append(torch.autograd.grad(logits.sin().sum(), list(model.parameters())))
    for got, want in zip(*reversed(results), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)
    if chunks == "one":
        assert skipped == [900] * (steps // 2)
    else:
        assert len(skipped) == 8 * steps and sum(skipped) == 900 * steps
