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


def test_a_config_inside_its_run_dir_is_never_rewritten(dataset, tmp_path, capsys):  # noqa: F811
    run = tmp_path / "runs" / "exp1"
    run.mkdir(parents=True)
    config = write_config(
        run / "config.yaml",
        data={"graphs": str(dataset["graphs"])},
        optim={"max_steps": 1},
        run={"dir": str(run), "device": "cpu"},
    )
    config.write_text("# my experiment\n" + config.read_text())
    written = config.read_text()
    argv = ["train", "--config", str(config)]
    assert main([*argv, "--set", "optim.lr=0.5"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"partgnn: error: {config}: is the config the run writes in its run.dir ({run}), and "
        "optim.lr=0.5 would be written into it: copy it elsewhere and give that to --config, "
        "or set run.dir to another folder"
    )
    assert main(argv) == 0, capsys.readouterr().err  # the file alone: trains, file untouched
    assert config.read_text() == written
    assert main([*argv, "--resume"]) == 0 and config.read_text() == written


def test_a_run_dir_below_a_file_is_one_line_and_status_2(dataset, tmp_path, capsys):  # noqa: F811
    below = tmp_path / "a-file"
    below.write_text("x")
    config = write_config(tmp_path / "c.yaml", data={"graphs": str(dataset["graphs"])},
                          run={"dir": str(below / "run")})  # fmt: skip
    assert main(["train", "--config", str(config)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"partgnn: error: {below / 'run'}: cannot write here ({below} is a file, not a folder)"
    )
