"""Multi-layer perceptrons with LayerNorm or BatchNorm, the building block of the Interaction
Network."""

from __future__ import annotations

import itertools
from typing import Literal, get_args

from torch import nn

from partgnn.models.graph_batch_norm import GraphBatchNorm, Rows

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
    batch_norm: Rows | None = None,
    output_activation: bool = True,
) -> nn.Sequential:
    """Builds ``layers`` linear layers, each followed by a norm and the activation.

    LayerNorm normalises each row on its own, so it is exact on a partition as it is. BatchNorm
    (the reference pipeline's choice) normalises with the statistics of all the graph's edge or
    node rows, reduced over the ranks that hold them
    (:class:`~partgnn.models.graph_batch_norm.GraphBatchNorm`); as in the reference, it follows
    the hidden layers only (which then have no bias: its shift replaces it) and the last layer is
    followed by the activation alone.

    Args:
        in_features: Input width.
        hidden: Width of the hidden layers.
        out_features: Output width.
        layers: Number of linear layers, >= 1.
        activation: A key of :data:`ACTIVATIONS`.
        layer_norm: Put LayerNorm after every linear layer (but a plain output layer).
        batch_norm: Put a :class:`GraphBatchNorm` of these rows (``"edges"`` or ``"nodes"``)
            after every hidden linear layer instead (``layer_norm`` must be ``False``).
        output_activation: Whether the last linear layer is followed by norm and activation;
            ``False`` for an output head producing logits.

    Returns:
        The MLP mapping ``(*, in_features) -> (*, out_features)``.
    """
    if layers < 1:
        raise ValueError(f"an MLP needs at least one layer (got {layers})")
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r} (choose {', '.join(ACTIVATIONS)})")
    if layer_norm and batch_norm is not None:
        raise ValueError("an MLP normalises with LayerNorm or BatchNorm, not both")
    widths = [in_features] + [hidden] * (layers - 1) + [out_features]
    modules: list[nn.Module] = []
    for index, (width_in, width_out) in enumerate(itertools.pairwise(widths)):
        last = index == layers - 1
        normalised_by_batch = batch_norm is not None and not last
        # A bias before BatchNorm is removed by it (and its gradient is 0): none.
        modules.append(nn.Linear(width_in, width_out, bias=not normalised_by_batch))
        if not last or output_activation:
            if layer_norm:
                modules.append(nn.LayerNorm(width_out))
            elif normalised_by_batch:
                modules.append(GraphBatchNorm(width_out, batch_norm))
            modules.append(ACTIVATIONS[activation]())
    return nn.Sequential(*modules)
