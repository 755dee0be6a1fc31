"""The cases both fused LayerNorm + activation paths (the C++ kernel and the compiled operators)
are checked on against the plain modules."""

from __future__ import annotations

import torch
from torch import nn


def modules(kind: str, width: int) -> list[nn.Module]:
    """``[LayerNorm?, activation?]`` of one kind, the norm's parameters away from 1 and 0."""
    norm = nn.LayerNorm(width)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
    return {
        "norm_silu": [norm, nn.SiLU()],
        "norm_relu": [norm, nn.ReLU()],
        "norm": [norm],
        "silu": [nn.SiLU()],
    }[kind]


def plain(z, run: list[nn.Module], shift, post):
    """``run(z + shift) + post`` op by op."""
    z = z + shift if shift is not None else z
    for module in run:
        z = module(z)
    return post + z if post is not None else z


def float64_case(run: list[nn.Module], n_rows: int, width: int, addends: str):
    """``(z, shift, post, grad_out, inputs)`` in float64: ``shift``/``post`` given as
    ``addends`` says (``none``, ``shift``, ``post``, ``both``), ``inputs`` every tensor a
    gradient is checked for (the run's parameters last)."""
    rows = (n_rows, width)
    z = torch.randn(rows, dtype=torch.float64, requires_grad=True)
    shift = torch.randn(width, dtype=torch.float64, requires_grad=True)
    post = torch.randn(rows, dtype=torch.float64, requires_grad=True)
    shift = shift if addends in ("shift", "both") else None
    post = post if addends in ("post", "both") else None
    grad_out = torch.randn(rows, dtype=torch.float64)
    inputs = [t for t in (z, shift, post) if t is not None]
    inputs += [p for m in run for p in m.parameters()]
    return z, shift, post, grad_out, inputs
