"""One training step's computation on one rank: forward pass, loss, backward pass.

:func:`forward_backward` is what the trainer runs for every event and what the memory planner
(:mod:`partgnn.train.planning.footprint`) measures, so the planner cannot drift from training.
Combining the gradients across ranks and the optimizer step are the trainer's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from partgnn.train.config.sections import TrainConfig
from partgnn.train.items.train_item import TrainItem
from partgnn.train.loss import DTYPES, EdgeWeights, autocast, edge_loss
from partgnn.train.precision import resolve_bf16


@dataclass(frozen=True)
class StepSettings:
    """What a step's arithmetic depends on besides the model and the event.

    Attributes:
        dtype: Parameter and activation dtype (``run.dtype``).
        bf16: Forward pass under bf16 autocast (``run.bf16``).
        weights: The loss weights of the kinds of edges (the ``loss`` section).
        autocast_cache: Autocast keeps the weights' bf16 casts for the pass (off inside a CUDA
            graph capture: :mod:`partgnn.train.captured_step`).
    """

    dtype: torch.dtype
    bf16: bool
    weights: EdgeWeights
    autocast_cache: bool = True

    @classmethod
    def of(cls, config: TrainConfig, device: torch.device | None = None) -> StepSettings:
        """The settings of a run config on ``device`` (``run.bf16: auto`` resolved there;
        default: the CPU)."""
        bf16 = resolve_bf16(config.run.bf16, device or torch.device("cpu"))
        return cls(DTYPES[config.run.dtype], bf16, config.loss.edge_weights())


def edge_logits(model: nn.Module, item: TrainItem, dtype: torch.dtype) -> torch.Tensor:
    """The model's logits of ``item``'s local edges ``(E_local,)`` (a collective in halo mode:
    the model calls the item's exchange; partgnn's model gets the item's interior-first edge
    order where the item carries one)."""
    order = {} if item.interior_first is None else {"edge_order": item.interior_first}
    return model(
        item.x.to(dtype), item.edge_index, item.edge_attr.to(dtype), exchange=item.exchange,
        **order,
    )  # fmt: skip


def training_loss(model: nn.Module, item: TrainItem, settings: StepSettings) -> torch.Tensor:
    """The loss of the edges this rank counts, over the item's normaliser (a scalar with its
    autograd graph); the forward pass runs under bf16 autocast if the settings say so."""
    with autocast(item.x.device, settings.bf16, cache=settings.autocast_cache):
        logits = edge_logits(model, item, settings.dtype)
    return edge_loss(
        item.select_counted(logits.to(settings.dtype)),
        item.select_counted(item.y.to(settings.dtype)),
        settings.weights.pos_weight,
        item.normaliser,
        weight=None if item.weight is None else item.select_counted(item.weight),
    )


def forward_backward(model: nn.Module, item: TrainItem, settings: StepSettings) -> torch.Tensor:
    """Forward pass, loss and backward pass of one event on this rank: the parameters'
    ``.grad`` accumulate this rank's part of the gradient.

    .. warning::
        In halo mode a collective of the graph group (forward and backward exchanges): every
        rank of the group calls it for the same event.

    Returns:
        The loss, detached.
    """
    loss = training_loss(model, item, settings)
    loss.backward()
    return loss.detach()
