"""An evaluation during training: one row of a run's ``metrics.csv``, and the last one, which
its ``summary.json`` keeps as ``final``.

The trainer makes an :class:`EpochMetrics` at every evaluation; :meth:`EpochMetrics.as_row` is
the row it logs (validation figures prefixed ``val_``) and :meth:`EpochMetrics.of_row` the one
reader of a summary's ``final``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from partgnn import json_files
from partgnn.errors import InputError
from partgnn.metrics.edge_counts import EdgeRates

NAN = json_files.NAN

#: The prefix of the validation figures in a row.
VALIDATION_PREFIX = "val_"


@dataclass(frozen=True)
class ValidationMetrics(EdgeRates):
    """Loss and edge figures of the validation events, summed over the ranks: the rates of
    :class:`~partgnn.metrics.edge_counts.EdgeRates` of the counted edges at the score cut 0.5
    (edges a naive sector could not score count as missed) and the figures below (NaN: not
    recorded).

    Attributes:
        loss: The mean validation loss.
        best_cut: The score cut that maximises the edge F-beta score (``run.cut_beta``).
        best_cut_efficiency, best_cut_purity, best_cut_fscore: The figures at that cut.
    """

    loss: float = NAN
    best_cut: float = NAN
    best_cut_efficiency: float = NAN
    best_cut_purity: float = NAN
    best_cut_fscore: float = NAN

    @classmethod
    def names(cls) -> list[str]:
        """The figures' names (without the row's prefix)."""
        return [field.name for field in dataclasses.fields(cls)]


@dataclass(frozen=True)
class EpochMetrics:
    """What one evaluation during training recorded.

    Attributes:
        epoch, step: Where training stood.
        lr: The learning rate then.
        train_loss: The epoch's mean training loss.
        step_time_s, data_time_s: The epoch's mean step time and time waiting for data [s].
        epoch_wall_s, epoch_step_s: The epoch's wall time and its summed step time [s].
        peak_memory_mb_max: The largest of the ranks' peak memory [MiB].
        peak_memory_mb_per_rank: Every rank's peak memory [MiB], by global rank.
        bytes_exchanged: Bytes all ranks sent in halo exchanges so far.
        validation: The validation figures (``None``: the run has no validation events).
        peak_allocated_mb_per_rank: On GPUs, every rank's peak of live tensors [MiB]
            (``None``: not on a GPU).
        device_used_mb_per_rank: On GPUs, the memory every rank's GPU had in use [MiB].
    """

    epoch: int
    step: int
    lr: float = NAN
    train_loss: float = NAN
    step_time_s: float = NAN
    data_time_s: float = NAN
    epoch_wall_s: float = NAN
    epoch_step_s: float = NAN
    peak_memory_mb_max: float = NAN
    peak_memory_mb_per_rank: list[float] = dataclasses.field(default_factory=list)
    bytes_exchanged: float = NAN
    validation: ValidationMetrics | None = None
    peak_allocated_mb_per_rank: list[float] | None = None
    device_used_mb_per_rank: list[float] | None = None

    def as_row(self) -> dict[str, Any]:
        """The record as a flat row (``metrics.csv``'s columns, a summary's ``final``): the
        validation figures prefixed ``val_``, the GPU lists only on GPUs."""
        row = {
            field.name: getattr(self, field.name)
            for field in dataclasses.fields(self)
            if field.name != "validation" and getattr(self, field.name) is not None
        }
        if self.validation is None:
            return row
        validation = dataclasses.asdict(self.validation)
        return {**row, **{VALIDATION_PREFIX + name: v for name, v in validation.items()}}

    @classmethod
    def of_row(cls, content: dict[str, Any], where: str) -> EpochMetrics:
        """The record a flat row holds (a summary's ``final``; what it lacks: NaN, empty or
        ``None``).

        Raises:
            InputError: A figure that is not a number, a per-rank list that is not a list of
                numbers, or no whole ``epoch`` and ``step`` (one line naming ``where`` and the
                field).
        """
        whole = json_files.counts(content, ("epoch", "step"), where, required=True)
        scalars = [
            field.name
            for field in dataclasses.fields(cls)
            if field.type in ("float", float) and field.name not in whole
        ]
        lists = {
            name: _numbers_list(content, name, where)
            for name in (
                "peak_memory_mb_per_rank", "peak_allocated_mb_per_rank", "device_used_mb_per_rank"
            )
        }  # fmt: skip
        names = [VALIDATION_PREFIX + name for name in ValidationMetrics.names()]
        validation = json_files.numbers(content, names, where)
        return cls(
            **whole,
            **json_files.numbers(content, scalars, where),
            peak_memory_mb_per_rank=lists["peak_memory_mb_per_rank"] or [],
            peak_allocated_mb_per_rank=lists["peak_allocated_mb_per_rank"],
            device_used_mb_per_rank=lists["device_used_mb_per_rank"],
            validation=(
                ValidationMetrics(
                    **{name.removeprefix(VALIDATION_PREFIX): v for name, v in validation.items()}
                )
                if any(name in content for name in names)
                else None
            ),
        )


def _numbers_list(content: dict[str, Any], name: str, where: str) -> list[float] | None:
    """A list of numbers of a row (``None``: absent)."""
    value = content.get(name)
    if value is None:
        return None
    if not isinstance(value, list):
        raise InputError(f"{where}: {name} must be a list of numbers (got {value!r:.40})")
    items = {f"{name}[{index}]": item for index, item in enumerate(value)}
    return list(json_files.numbers(items, items, where).values())
