"""metrics.csv after resumes: no step twice, a torn last row dropped."""

from __future__ import annotations

import csv

from partgnn.metrics.epoch_metrics import EpochMetrics
from partgnn.train.run_directory.run_log import RunLog


def _steps(log: RunLog) -> list[int]:
    with open(log.metrics_path, newline="") as handle:
        return [int(row["step"]) for row in csv.DictReader(handle)]


def test_a_step_logged_again_replaces_the_rows_from_it_on(tmp_path):
    log = RunLog(tmp_path, tensorboard=False)
    for step in (3, 6, 9):
        log.metrics(EpochMetrics(epoch=step // 3, step=step, train_loss=0.1))
    resumed = RunLog(tmp_path, tensorboard=False, resume_step=6)
    assert _steps(resumed) == [3, 6]
    resumed.metrics(EpochMetrics(epoch=2, step=6, train_loss=0.2))  # the resume step, again
    resumed.metrics(EpochMetrics(epoch=3, step=9, train_loss=0.3))
    assert _steps(resumed) == [3, 6, 9]
    with open(resumed.metrics_path, newline="") as handle:
        assert [row["train_loss"] for row in csv.DictReader(handle)] == ["0.1", "0.2", "0.3"]


def test_a_torn_last_row_is_dropped_on_resume(tmp_path):
    log = RunLog(tmp_path, tensorboard=False)
    log.metrics(EpochMetrics(epoch=1, step=3, train_loss=0.1))
    with open(log.metrics_path, "a") as handle:
        handle.write("2,6,0.00")  # a kill in the middle of a row
    resumed = RunLog(tmp_path, tensorboard=False, resume_step=6)
    assert _steps(resumed) == [3]
