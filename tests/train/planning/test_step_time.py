"""The step-time plan (issue 69, item 4): probes timed on the run's device, a graph group's step
from them and a link, the fastest setting that fits, and ``partgnn plan --step-time``."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from partgnn.cli.main import main
from partgnn.cli.plan_commands import _step_lines
from partgnn.train.config.config_file import load_config
from partgnn.train.planning import step_time
from partgnn.train.planning.step_time import (
    LINKS,
    StepPrediction,
    StepTime,
    communication_seconds,
    fastest,
    measure_step_time,
)
from tests.train.conftest import probes_at_test_size, write_config

SMALL_TIME_PROBES = ((200, 1_000), (400, 3_000), (800, 6_000))


def _prediction(recompute, captured, compute, peak) -> StepPrediction:
    return StepPrediction(recompute, captured, compute, 0.001, 0.0005, peak)


def test_the_fastest_setting_that_fits_is_chosen():
    settings = [
        _prediction(False, False, 0.030, 9e9),
        _prediction(True, False, 0.040, 5e9),
        _prediction(True, True, 0.020, 6e9),
        _prediction(False, True, 0.010, None),  # peak not measured: never "fits"
    ]
    assert fastest(settings, None) is settings[3]
    assert fastest(settings, 8e9) is settings[2]
    assert fastest(settings, 5.5e9) is settings[1]
    assert fastest(settings, 1e9) is None
    assert settings[2].step_s == pytest.approx(0.0215)


def test_communication_is_the_link_model_and_nothing_on_one_rank():
    assert communication_seconds(group_size=1, halo_rows=10**5, row_bytes=256, exchanges=18,
                                 gradient_bytes=10**6, link="nvlink") == (0.0, 0.0)  # fmt: skip
    bandwidth, latency = LINKS["ndr"]
    exchange, allreduce = communication_seconds(
        group_size=4, halo_rows=1000, row_bytes=256, exchanges=18, gradient_bytes=4 * 10**6,
        link="ndr",
    )  # fmt: skip
    assert exchange == pytest.approx(18 * (latency + 256_000 / bandwidth))
    assert allreduce == pytest.approx(1.5 * 4e6 / bandwidth + 6 * latency)


def test_a_step_time_is_its_fit():
    fit = StepTime(0.002, 1e-8, 2e-8, ((10, 100, 0.002),))
    assert fit.seconds(1000, 10_000) == pytest.approx(0.002 + 1e-4 + 2e-5)
    assert StepTime(-1.0, 0.0, 0.0, ()).seconds(1, 1) == 0.0


def test_steps_are_timed_on_every_probe(dataset, tmp_path, monkeypatch):
    monkeypatch.setattr(step_time, "TIME_PROBES", SMALL_TIME_PROBES)
    config = load_config(write_config(tmp_path / "c.yaml", data={"graphs": str(dataset["graphs"])}))
    fit = measure_step_time(config, 4, 2, torch.device("cpu"))
    assert [(n, e) for n, e, _ in fit.probes] == list(SMALL_TIME_PROBES)
    assert all(seconds > 0 for _, _, seconds in fit.probes)
    largest = fit.probes[-1]
    assert fit.seconds(largest[0], largest[1]) == pytest.approx(largest[2], rel=0.5)


@pytest.mark.slow
@pytest.mark.heap_meter  # the plan's footprint meters the heap: early, while it is unfragmented
def test_partgnn_plan_step_time_predicts_each_setting(dataset, tmp_path, capsys, monkeypatch):
    probes_at_test_size(monkeypatch)
    monkeypatch.setattr(step_time, "TIME_PROBES", SMALL_TIME_PROBES)
    config = write_config(
        tmp_path / "c.yaml", mode="halo", model={"recompute": True},
        data={"graphs": str(dataset["graphs"]), "shards": str(dataset["phi2"])},
        run={"device": "cpu"},
    )  # fmt: skip
    args = ["plan", "--config", str(config), "--step-time", "--link", "ndr", "--json"]
    assert main(args) == 0
    plan = json.loads(capsys.readouterr().out)
    record = plan["step_time"]
    assert record["link"] == "ndr"
    settings = {(s["recompute"], s["captured"]): s for s in record["settings"]}
    assert set(settings) == {(True, False), (False, False)}  # no CUDA graphs on the CPU
    for setting in settings.values():
        assert setting["exchange_s"] > 0 and setting["allreduce_s"] > 0
        assert setting["step_s"] == pytest.approx(
            setting["compute_s"] + setting["exchange_s"] + setting["allreduce_s"]
        )
    # The configured setting's peak is the plan's; the other's needs --memory-gb.
    assert settings[True, False]["peak_bytes"] == plan["peak_bytes"]
    assert settings[False, False]["peak_bytes"] is None


def test_the_plan_prints_the_settings_and_its_choice():
    plan = SimpleNamespace(device=torch.device("cpu"), group_size=2)
    settings = [_prediction(True, False, 0.040, 5e9), _prediction(False, False, 0.030, 9e9)]
    text = _step_lines(settings, plan, "nvlink", budget=6e9)
    rows = [line for line in text.splitlines() if line.startswith(("| on |", "| off |"))]
    assert rows[0] == "| on | off | 0.0400 | 0.0010 | 0.0005 | 0.0415 | 4768 |"
    assert "modelled on nvlink" in text and "CUDA graphs: none on cpu" in text
    assert text.splitlines()[-1] == (
        "chosen: the fastest that fits, recomputation on, CUDA graphs off (0.0415 s): "
        "--set model.recompute=true --set run.cuda_graphs=off"
    )
    assert _step_lines(settings, plan, "nvlink", budget=1e9).endswith(
        "chosen: no setting fits the memory given"
    )
