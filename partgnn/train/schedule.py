"""The learning rate's schedule: a pure function of the optimizer step.

``optim.warmup_steps`` of linear warm-up from 0 to ``optim.lr``, then constant, a cosine to 0
at the last step, or steps of ``optim.decay_factor`` every ``optim.decay_steps`` steps; the
whole scaled for the events each step trains (``optim.lr_scaling``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch

from partgnn.train.config.sections import OptimConfig


def lr_scale(scaling: str, events_per_step: int) -> float:
    """The learning rate's factor for ``G = events_per_step`` events per step: ``none`` 1,
    ``linear`` G, ``sqrt`` sqrt(G)."""
    return {"none": 1.0, "linear": float(events_per_step), "sqrt": math.sqrt(events_per_step)}[
        scaling
    ]


def schedule_factor(
    step: int,
    *,
    warmup_steps: int,
    schedule: str,
    total_steps: int,
    decay_steps: int | None = None,
    decay_factor: float = 1.0,
) -> float:
    """The schedule's factor of the peak learning rate at ``step`` (0-based), in (0, 1].

    ``step``: ``decay_factor ** (step // decay_steps)``, times the warm-up's ramp during it (as
    acorn's warm-up scales its ``StepLR``'s rate)."""
    if schedule == "step":
        decayed = decay_factor ** (step // decay_steps) if decay_steps else 1.0
        ramp = (step + 1) / warmup_steps if warmup_steps and step < warmup_steps else 1.0
        return ramp * decayed
    if warmup_steps and step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    span = max(total_steps - warmup_steps, 1)
    return 0.5 * (1.0 + math.cos(math.pi * min(step - warmup_steps, span) / span))


def learning_rate_factor(
    optim: OptimConfig, *, total_steps: int, events_per_step: int
) -> Callable[[int], float]:
    """The factor of ``optim.lr`` at each step (0-based), for
    ``torch.optim.lr_scheduler.LambdaLR``: :func:`lr_scale` times :func:`schedule_factor`.

    A plain function (a closure), so the scheduler's state in a checkpoint holds no object of
    it (LambdaLR saves the attributes of callable objects).
    """
    scale = lr_scale(optim.lr_scaling, events_per_step)

    def factor(step: int) -> float:
        return scale * schedule_factor(
            step,
            warmup_steps=optim.warmup_steps,
            schedule=optim.schedule,
            total_steps=total_steps,
            decay_steps=optim.decay_steps,
            decay_factor=optim.decay_factor,
        )

    return factor


def adamw_with_schedule(
    parameters: Iterable[torch.nn.Parameter],
    optim: OptimConfig,
    *,
    total_steps: int,
    events_per_step: int,
) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW at ``optim.lr`` with its weight decay, and the scheduler that sets its rate every
    step (:func:`learning_rate_factor`: ``scheduler.lr_lambdas[0]``)."""
    optimizer = torch.optim.AdamW(parameters, lr=optim.lr, weight_decay=optim.weight_decay)
    factor = learning_rate_factor(optim, total_steps=total_steps, events_per_step=events_per_step)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
