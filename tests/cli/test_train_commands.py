"""``partgnn train`` on the command line: ``--device`` overrides the config's ``run.device``."""

from __future__ import annotations

import pytest
import torch
import yaml

from partgnn.cli.main import main
from tests.train.conftest import dataset, write_config  # noqa: F401 (the fixture)


def test_device_option_overrides_the_config(dataset, tmp_path, capsys):  # noqa: F811
    run = tmp_path / "run"
    config = write_config(
        tmp_path / "full.yaml",
        data={"graphs": str(dataset["graphs"])},
        optim={"max_steps": 1},
        run={"dir": str(run), "device": "cuda:7"},
    )
    assert main(["train", "--config", str(config), "--device", "cpu"]) == 0
    assert yaml.safe_load((run / "config.yaml").read_text())["run"]["device"] == "cpu"
    assert "trained 1 steps (full)" in capsys.readouterr().out


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_device_cuda_without_cuda_is_one_line(dataset, tmp_path, capsys):  # noqa: F811
    config = write_config(tmp_path / "full.yaml", data={"graphs": str(dataset["graphs"])})
    assert main(["train", "--config", str(config), "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "CUDA is not available" in err[0], err
