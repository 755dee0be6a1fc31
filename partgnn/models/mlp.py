"""Multi-layer perceptrons with LayerNorm, the building block of the Interaction Network."""

from __future__ import annotations

import itertools
from typing import Literal, get_args

from torch import nn

#: Activation names accepted by :func:`make_mlp` (and by a run config's ``model.activation``).
Activation = Literal["relu", "silu", "gelu", "tanh", "leaky_relu"]

#: The module of each activation name.
ACTIVATIONS: dict[str, type[nn.Module]] = dict(
    zip(get_args(Activation), (nn.ReLU, nn.SiLU, nn.GELU, nn.Tanh, nn.LeakyReLU), strict=True)
)


def make_mlp(
    in_features: int,
    hidden: int,
    out_features: int,
    *,
    layers: int = 2,
    activation: str = "relu",
    layer_norm: bool = True,
    output_activation: bool = True,
) -> nn.Sequential:
    """Builds ``layers`` linear layers, each followed by LayerNorm and the activation.

    LayerNorm normalises each row on its own, so it is exact on a partition (unlike
    BatchNorm, whose statistics would have to be reduced across ranks).

    Args:
        in_features: Input width.
        hidden: Width of the hidden layers.
        out_features: Output width.
        layers: Number of linear layers, >= 1.
        activation: A key of :data:`ACTIVATIONS`.
        layer_norm: Put LayerNorm after every linear layer (but a plain output layer).
        output_activation: Whether the last linear layer is followed by norm and activation;
            ``False`` for an output head producing logits.

    Returns:
        The MLP mapping ``(*, in_features) -> (*, out_features)``.
    """
    if layers < 1:
        raise ValueError(f"an MLP needs at least one layer (got {layers})")
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r} (choose {', '.join(ACTIVATIONS)})")
    widths = [in_features] + [hidden] * (layers - 1) + [out_features]
    modules: list[nn.Module] = []
    for index, (width_in, width_out) in enumerate(itertools.pairwise(widths)):
        modules.append(nn.Linear(width_in, width_out))
        last = index == layers - 1
        if not last or output_activation:
            if layer_norm:
                modules.append(nn.LayerNorm(width_out))
            modules.append(ACTIVATIONS[activation]())
    return nn.Sequential(*modules)
