"""``partgnn train`` and :func:`partgnn.api.fit` are one workflow (:func:`partgnn.train.
training_run.run_training`): the same settings act the same through either, here
``run.keep_freed_heap``, which once worked only through the command."""

from __future__ import annotations

import pytest

import partgnn.memory.heap_retention as heap_retention
from partgnn import api
from partgnn.cli.main import main
from tests.train.conftest import write_config


@pytest.mark.parametrize("entry", ["api.fit", "partgnn train"])
def test_keep_freed_heap_acts_through_the_api_and_the_command(
    entry, dataset, tmp_path, monkeypatch, capsys
):
    calls = []
    monkeypatch.setattr(heap_retention, "keep_freed_heap", lambda: calls.append("kept"))
    config = write_config(
        tmp_path / "full.yaml", data={"graphs": str(dataset["graphs"])}, optim={"max_steps": 1},
        run={"dir": str(tmp_path / "run"), "keep_freed_heap": True},
    )  # fmt: skip
    if entry == "api.fit":
        summary = api.fit(config)
    else:
        assert main(["train", "--config", str(config)]) == 0
        summary = None
    assert calls == ["kept"]
    assert (tmp_path / "run" / "summary.json").is_file()
    if summary is not None:
        assert summary.steps == 1 and summary.mode == "full"
    capsys.readouterr()
