"""Where training stands: the position in the epochs, the epoch's running sums, the score cut
chosen so far and the wall time of earlier sittings; what a checkpoint records of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from partgnn.train.workload import EpochTotals


@dataclass
class TrainState:
    """Where training stands.

    Attributes:
        epoch: The epoch being trained (0-based).
        step: Optimizer steps taken.
        step_in_epoch: Steps taken in this epoch.
        totals: The epoch's running sums.
        score_cut: The edge score cut chosen on the validation events at the last evaluation
            (``None``: none yet).
        earlier_wall_s: Wall time [s] of the sittings before this one.
    """

    epoch: int = 0
    step: int = 0
    step_in_epoch: int = 0
    totals: EpochTotals = field(default_factory=EpochTotals)
    score_cut: float | None = None
    earlier_wall_s: float = 0.0

    def record_step(self, loss: float, seconds: float, data_seconds: float) -> None:
        """Counts one optimizer step of ``loss``, ``seconds`` of compute and communication and
        ``data_seconds`` of getting its event."""
        self.step += 1
        self.step_in_epoch += 1
        self.totals.loss += loss
        self.totals.steps += 1
        self.totals.seconds += seconds
        self.totals.data_seconds += data_seconds

    def next_epoch(self) -> None:
        """Starts the next epoch's counts."""
        self.epoch += 1
        self.step_in_epoch = 0
        self.totals = EpochTotals()

    def as_checkpoint(self, wall_time_s: float) -> dict[str, Any]:
        """The checkpoint's record of the position (``wall_time_s``: of every sitting so far)."""
        return {
            "epoch": self.epoch,
            "step": self.step,
            "step_in_epoch": self.step_in_epoch,
            "totals": self.totals.as_dict(),
            "score_cut": self.score_cut,
            "wall_time_s": wall_time_s,
        }

    @classmethod
    def from_checkpoint(cls, checkpoint: dict[str, Any]) -> TrainState:
        """The state a checkpoint records (:meth:`as_checkpoint`)."""
        return cls(
            epoch=int(checkpoint["epoch"]),
            step=int(checkpoint["step"]),
            step_in_epoch=int(checkpoint["step_in_epoch"]),
            totals=EpochTotals(**checkpoint["totals"]),
            score_cut=checkpoint.get("score_cut"),
            earlier_wall_s=float(checkpoint.get("wall_time_s", 0.0)),
        )
