"""The loss every mode trains with, its normaliser, and the arithmetic precision of a run.

Weighted binary cross-entropy: true edges weigh ``pos_weight``, false edges 1, summed over the
edges a rank counts and divided by a normaliser. The normaliser of an event is its *weighted
edge count* ``sum over edges of (1 + (pos_weight - 1) * y)``; with the event's global count
the losses of the ranks of one event add up to the full-graph loss (halo mode), and the
Python API's :func:`partgnn.api.owned_edge_loss` divides by the same count.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch
import torch.nn.functional as F

#: ``run.dtype`` -> parameter and activation dtype.
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float64": torch.float64}


def edge_loss(
    logits: torch.Tensor, y: torch.Tensor, pos_weight: float, normaliser: float
) -> torch.Tensor:
    """Weighted BCE summed over edges and divided by ``normaliser``.

    Args:
        logits: Edge logits ``(E,)``.
        y: Edge truth ``(E,)`` (0 or 1, in the logits' dtype).
        pos_weight: Weight of true edges (false edges weigh 1).
        normaliser: The denominator (an event's :func:`weighted_count`).

    Returns:
        A scalar.
    """
    weight = 1.0 + (pos_weight - 1.0) * y
    total = F.binary_cross_entropy_with_logits(logits, y, weight=weight, reduction="sum")
    return total / normaliser


def weighted_count(n_edges: int, n_true: int, pos_weight: float) -> float:
    """``sum(1 + (pos_weight - 1) * y)`` over ``n_edges`` edges of which ``n_true`` are true
    (at least 1, so an event without edges divides by 1)."""
    return max(n_edges + (pos_weight - 1.0) * n_true, 1.0)


def autocast(device: torch.device, bf16: bool) -> AbstractContextManager[object]:
    """bf16 autocast on ``device`` for a forward pass when ``bf16`` (``run.bf16``), else
    nothing."""
    return torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else nullcontext()
