"""The run directory: config snapshot, metrics.csv, TensorBoard logs, summary.json.

Only the main process (global rank 0) writes; every write of a whole file is atomic, and
metrics.csv grows one row per evaluation.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from partgnn import json_files
from partgnn.data.files.output_files import atomic_output
from partgnn.errors import InputError
from partgnn.metrics.epoch_metrics import EpochMetrics, ValidationMetrics
from partgnn.metrics.run_summary import SUMMARY_NAME, RunSummary
from partgnn.train.run_directory.experiment_loggers import ExperimentLogger, open_loggers
from partgnn.train.workload import EpochTotals

#: Columns of metrics.csv, in order.
METRIC_COLUMNS = (
    "epoch",
    "step",
    "lr",
    "train_loss",
    "val_loss",
    "val_efficiency",
    "val_purity",
    "val_boundary_efficiency",
    "val_boundary_purity",
    "val_interior_efficiency",
    "val_interior_purity",
    "val_best_cut",
    "val_best_cut_efficiency",
    "val_best_cut_purity",
    "val_best_cut_fscore",
    "step_time_s",
    "data_time_s",
    "epoch_wall_s",
    "epoch_step_s",
    "peak_memory_mb_max",
    "peak_memory_mb_per_rank",
    "bytes_exchanged",
)


def epoch_row(
    epoch: int,
    step: int,
    totals: EpochTotals,
    *,
    lr: float,
    memory_mb: list[float],
    bytes_sent: float,
    cuda_memory: tuple[list[float], list[float]] | None,
    validation: ValidationMetrics | None,
) -> EpochMetrics:
    """One evaluation's metrics (its :meth:`~EpochMetrics.as_row` is a metrics.csv row,
    :data:`METRIC_COLUMNS`; the CUDA memory columns are TensorBoard's only).

    Args:
        epoch, step: Where training stands.
        totals: The epoch's running sums.
        lr: The learning rate now.
        memory_mb: Every rank's peak memory [MiB].
        bytes_sent: Bytes the halo exchanges sent, all ranks.
        cuda_memory: Every rank's peak allocated and in-use GPU memory [MiB] (``None`` on
            CPUs).
        validation: The validation metrics (``None``: no validation events).
    """
    return EpochMetrics(
        epoch=epoch,
        step=step,
        lr=lr,
        train_loss=totals.mean(totals.loss),
        step_time_s=totals.mean(totals.seconds),
        data_time_s=totals.mean(totals.data_seconds),
        epoch_wall_s=totals.wall_seconds,
        epoch_step_s=totals.seconds,
        peak_memory_mb_max=max(memory_mb),
        peak_memory_mb_per_rank=memory_mb,
        bytes_exchanged=bytes_sent,
        validation=validation,
        peak_allocated_mb_per_rank=None if cuda_memory is None else cuda_memory[0],
        device_used_mb_per_rank=None if cuda_memory is None else cuda_memory[1],
    )


class RunLog:
    """Writes the files of a run directory.

    Args:
        directory: The run directory (created).
        tensorboard: Also write TensorBoard event files under ``tb/``.
        loggers: Experiment trackers that get what TensorBoard gets
            (:mod:`partgnn.train.run_directory.experiment_loggers`).
        resume_step: When resuming, metrics.csv rows after this step are dropped (they were
            logged after the checkpoint the run continues from).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        tensorboard: bool,
        resume_step: int | None = None,
        loggers: Sequence[ExperimentLogger] = (),
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.directory / "metrics.csv"
        self.rows: list[dict[str, str]] = []
        if resume_step is not None and self.metrics_path.exists():
            self.rows = [r for r in self._read_rows() if int(r["step"]) <= resume_step]
        self._rewrite(self.rows)
        self.writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(self.directory / "tb"), purge_step=resume_step)
        self.loggers = list(loggers)

    @classmethod
    def begin(
        cls,
        directory: str | os.PathLike[str],
        config: dict[str, Any],
        *,
        tensorboard: bool,
        loggers: Sequence[str],
        resume_step: int | None = None,
    ) -> RunLog:
        """The log of a run starting (or resumed at ``resume_step``) in ``directory``, its
        experiment loggers open
        (:func:`~partgnn.train.run_directory.experiment_loggers.open_loggers`) and its
        ``config.yaml`` written."""
        log = cls(
            directory, tensorboard=tensorboard, resume_step=resume_step,
            loggers=open_loggers(loggers, Path(directory), config, resume_step=resume_step),
        )  # fmt: skip
        log.write_config(config)
        return log

    def write_config(self, config: dict[str, Any]) -> None:
        """Writes the run's ``config.yaml``; a file there that holds the same config (the
        snapshot of the run being resumed, or the input config itself) is left as it is."""
        from partgnn.train.config.config_file import load_config

        path = self.directory / "config.yaml"
        if path.is_file():
            try:
                if load_config(path).to_dict() == config:
                    return
            except InputError:
                pass
        with atomic_output(path) as tmp:
            tmp.write_text(yaml.safe_dump(config, sort_keys=False))

    def scalar(self, name: str, value: float, step: int) -> None:
        if self.writer is not None:
            self.writer.add_scalar(name, value, step)
        for logger in self.loggers:
            logger.scalar(name, value, step)

    def metrics(self, metrics: EpochMetrics) -> None:
        """Appends a metrics.csv row and mirrors its numbers to TensorBoard.

        A row for a step already in the file (logged again after a resume) replaces the rows
        from that step on, so the file never holds a step twice. The row is one write, flushed
        and synced, so a kill leaves at most a torn last line, which the next resume drops.
        """
        row = metrics.as_row()
        formatted = {k: str(_format(row.get(k))) for k in METRIC_COLUMNS}
        step = int(row["step"])
        if self.rows and int(self.rows[-1]["step"]) >= step:
            self.rows = [r for r in self.rows if int(r["step"]) < step] + [formatted]
            self._rewrite(self.rows)
        else:
            self.rows.append(formatted)
            line = io.StringIO()
            csv.DictWriter(line, METRIC_COLUMNS).writerow(formatted)
            with open(self.metrics_path, "a", newline="") as handle:
                handle.write(line.getvalue())
                handle.flush()
                os.fsync(handle.fileno())
        for key, value in row.items():
            if key not in ("epoch", "step") and isinstance(value, (int, float)):
                self.scalar(f"epoch/{key}", value, int(row["step"]))

    def summary(self, summary: RunSummary) -> None:
        """Writes the run's ``summary.json`` (atomically)."""
        with atomic_output(self.directory / SUMMARY_NAME) as tmp:
            content = json_files.dumps(summary.as_json(), indent=2, sort_keys=True, default=str)
            tmp.write_text(content + "\n")

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        for logger in self.loggers:
            logger.close()

    def _read_rows(self) -> list[dict[str, str]]:
        """The complete rows of metrics.csv (a row torn by a kill, or garbled, is dropped)."""
        rows = []
        with open(self.metrics_path, newline="") as handle:
            for row in csv.DictReader(handle):
                if None in row or any(row.get(k) is None for k in METRIC_COLUMNS):
                    continue  # too many or too few fields
                try:
                    int(row["step"])
                except ValueError:
                    continue
                rows.append(row)
        return rows

    def _rewrite(self, rows: list[dict[str, str]]) -> None:
        with atomic_output(self.metrics_path) as tmp, open(tmp, "w", newline="") as handle:
            writer = csv.DictWriter(handle, METRIC_COLUMNS)
            writer.writeheader()
            writer.writerows(rows)


def _format(value: Any) -> Any:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return " ".join(_format(v) for v in value)
    return "" if value is None else value
