"""A run's summary.json: written and read as one record; the summaries older partgnn wrote still
read; a malformed one is refused in one line naming the file and the field."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from partgnn.errors import InputError
from partgnn.metrics.epoch_metrics import NAN, EpochMetrics, ValidationMetrics
from partgnn.metrics.run_summary import Communication, ComputedWork, RecordedMode, RunSummary
from partgnn.train.run_directory.run_log import RunLog
from partgnn.train.strategies import STRATEGIES


def _summary(**changes) -> RunSummary:
    fields = dict(
        mode="halo", mode_facts=STRATEGIES["halo"].facts.as_record(), world_size=4,
        group_size=2, steps=12, total_steps=12, epochs=3, parameters=1234, wall_time_s=2.5,
        final=EpochMetrics(
            epoch=2, step=12, train_loss=0.5, peak_memory_mb_per_rank=[10.0, 12.5],
            validation=ValidationMetrics(loss=0.25, efficiency=0.75, boundary_efficiency=NAN),
        ),
        communication=Communication(bytes_sent=4096),
        workload=ComputedWork(replicated_node_fraction=0.1, step_seconds_per_rank=[1.5, 2.0]),
    )  # fmt: skip
    fields.update(changes)
    return RunSummary(**fields)


def test_the_written_summary_reads_back_as_the_record(tmp_path: Path):
    summary = _summary()
    log = RunLog(tmp_path, tensorboard=False)
    log.summary(summary)
    log.close()
    content = json.loads((tmp_path / "summary.json").read_text())
    assert content["group_size"] == 2 and "graph_parallel_size" not in content
    assert "already_finished" not in content
    assert content["final"]["val_boundary_efficiency"] is None  # strict JSON: NaN is null
    assert content["final"]["val_loss"] == 0.25 and content["final"]["epoch"] == 2
    assert "peak_allocated_mb_per_rank" not in content["final"]  # GPUs only
    read = RunSummary.read(tmp_path)  # a run directory: its summary.json
    assert read == summary
    assert read.require_final().validation.loss == 0.25
    assert math.isnan(read.require_final().validation.boundary_efficiency)
    assert read.bytes_sent == 4096.0 and read.workload.replicated_node_fraction == 0.1
    assert read.recorded_mode == RecordedMode("halo", "halo exchange", True, False, False)


def test_a_final_evaluation_without_validation_or_on_gpus_reads_back(tmp_path: Path):
    """No validation events: no ``val_`` figures; on GPUs the device memory lists."""
    final = EpochMetrics(epoch=0, step=3, peak_allocated_mb_per_rank=[1.5, 2.5],
                         device_used_mb_per_rank=[900.0, 950.0])  # fmt: skip
    assert not any(key.startswith("val_") for key in final.as_row())
    log = RunLog(tmp_path, tensorboard=False)
    log.summary(_summary(final=final))
    log.close()
    assert RunSummary.read(tmp_path).final == final
    with pytest.raises(InputError, match="the run recorded no evaluation"):
        _summary(final=None).require_final()


def test_a_summary_of_older_partgnn_reads_by_its_old_names(tmp_path: Path):
    """Before 2026-12-02: no mode_facts, the group size as graph_parallel_size, overlapping
    sectors as strategy ``overlap`` of mode ``naive``."""
    path = tmp_path / "summary.json"
    old = {"mode": "naive", "strategy": "overlap", "world_size": 2, "graph_parallel_size": 2,
           "steps": 20, "epochs": 2, "sector_margin": 5}  # fmt: skip
    path.write_text(json.dumps(old))
    summary = RunSummary.read(path)
    assert summary.mode == "overlapping" and summary.group_size == 2
    assert summary.recorded_mode.phrase == "overlapping sectors"
    assert summary.total_steps == 20 and summary.sector_margin == 5
    assert math.isnan(summary.wall_time_s) and summary.parameters is None


@pytest.mark.parametrize(
    "content, message",
    [
        ("{", "not valid JSON"),
        ("[1]", "expected a JSON object, got list"),
        ("{}", "no 'mode_facts' and no known 'mode'"),
        (json.dumps({"mode": "halo", "steps": "many"}), "steps must be an integer"),
        (json.dumps({"mode": "halo", "final": [1]}), "final must be an object"),
        (json.dumps({"mode": "halo", "final": {"step": 1}}), "final: epoch must be a whole"),
        (
            json.dumps({"mode": "halo", "final": {"epoch": 0, "step": 1, "val_loss": "low"}}),
            "final: val_loss must be a number",
        ),
        (
            json.dumps(
                {
                    "mode": "halo",
                    "final": {"epoch": 0, "step": 1, "peak_memory_mb_per_rank": [1, "x"]},
                }
            ),
            r"final: peak_memory_mb_per_rank\[1\] must be a number",
        ),
        (json.dumps({"mode": "halo", "mode_facts": {"name": "halo"}}), "'mode_facts' lacks"),
    ],
)
def test_a_malformed_summary_is_refused_in_one_line(tmp_path: Path, content: str, message: str):
    path = tmp_path / "summary.json"
    path.write_text(content)
    with pytest.raises(InputError, match=message) as error:
        RunSummary.read(path)
    assert str(error.value).startswith(str(path)) and "\n" not in str(error.value)
    with pytest.raises(InputError, match="not found"):
        RunSummary.read(tmp_path / "elsewhere")
