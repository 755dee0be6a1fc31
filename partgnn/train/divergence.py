"""Training that stops being finite: found before the update that would spread it, and said in
one line on every rank.

Each step's one all-reduce carries every rank's flags (non-finite loss, non-finite gradient;
:meth:`~partgnn.train.strategies.Strategy.reduce_loss`); a step with any is not applied. A
checkpoint is never written with non-finite weights.
"""

from __future__ import annotations

import math

import torch

from partgnn.errors import TrainingDiverged


def gradients_finite(model: torch.nn.Module, device: torch.device) -> torch.Tensor:
    """Whether every gradient of ``model`` is finite, as a 0-d bool tensor on ``device`` (no
    host read)."""
    checks = [torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None]
    if not checks:
        return torch.ones((), dtype=torch.bool, device=device)
    return torch.stack(checks).all().to(device)


def check_step(
    reported: float, non_finite_ranks: list[tuple[int, str]], step: int, last_saved_step: int
) -> None:
    """Stops a step whose loss or gradients are not finite on some rank, before its update.

    Args:
        reported: The step's loss as the mode reports it.
        non_finite_ranks: ``(rank, "loss" or "gradient")`` of every rank with non-finite ones.
        step: The step (1-based).
        last_saved_step: The last checkpoint's step (0: none).

    Raises:
        TrainingDiverged: One line naming the step, the ranks and what.
    """
    if non_finite_ranks or not math.isfinite(reported):
        what = ", ".join(f"non-finite {kind} on rank {r}" for r, kind in non_finite_ranks)
        raise diverged(
            step, f"{what or f'non-finite loss ({reported})'}; stopped before the update",
            last_saved_step,
        )  # fmt: skip


def check_weights(model: torch.nn.Module, step: int, last_saved_step: int) -> None:
    """Refuses to save non-finite weights (every rank holds the same: all stop here).

    Raises:
        TrainingDiverged: One line naming the step.
    """
    if not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
        raise diverged(
            step, "its update made the weights non-finite; they are not saved", last_saved_step
        )


def diverged(step: int, what: str, last_saved_step: int) -> TrainingDiverged:
    """The one-line error of a run that stops at ``step`` (``last_saved_step`` 0: no checkpoint
    was written)."""
    last = (
        f"the last checkpoint (step {last_saved_step}) is finite"
        if last_saved_step
        else "no checkpoint was written"
    )
    return TrainingDiverged(
        f"step {step}: training diverged ({what}); {last}: lower optim.lr or set optim.grad_clip"
    )
