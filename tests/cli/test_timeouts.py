"""The collective timeout's one order of precedence, for every command that starts a group:
``--timeout``, else ``PARTGNN_DIST_TIMEOUT``, else the config's ``run.timeout_s`` (or the
command's default); a bad value is one line and exit 2."""

from __future__ import annotations

import pytest

from partgnn.cli.main import main
from tests.train.conftest import dataset, write_config  # noqa: F401 (the fixture)


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("value", ["0.001", "0", "-1", "abc"])
def test_every_command_reads_the_environment(dataset, tmp_path, capsys, monkeypatch, value):  # noqa: F811
    config = write_config(
        tmp_path / "full.yaml",
        data={"graphs": str(dataset["graphs"])},
        run={"dir": str(tmp_path / "run"), "timeout_s": 300},
    )
    monkeypatch.setenv("PARTGNN_DIST_TIMEOUT", value)
    commands = [
        ["train", "--config", str(config)],
        ["infer", "--checkpoint", "pretrained:trackml-pt1", "--graphs", str(dataset["graphs"]),
         "--out", str(tmp_path / "scores.h5")],
        ["selfcheck", "--device", "cpu"],
    ]  # fmt: skip
    for argv in commands:
        assert main(argv) == 2, argv
        line = _one_error_line(capsys)
        assert line.startswith(f"partgnn: error: PARTGNN_DIST_TIMEOUT='{value}' is not a"), line
    assert not (tmp_path / "run").exists() and not (tmp_path / "scores.h5").exists()


def test_the_option_comes_before_the_environment(dataset, tmp_path, capsys, monkeypatch):  # noqa: F811
    config = write_config(
        tmp_path / "full.yaml",
        data={"graphs": str(dataset["graphs"])},
        optim={"max_steps": 1},
        run={"dir": str(tmp_path / "run")},
    )
    monkeypatch.setenv("PARTGNN_DIST_TIMEOUT", "abc")
    assert main(["train", "--config", str(config), "--timeout", "30"]) == 0
    for command, value in (("selfcheck", "0.5"), ("train", "0"), ("infer", "-1")):
        with pytest.raises(SystemExit) as usage_error:  # the same bound as run.timeout_s
            main([command, "--timeout", value])
        assert usage_error.value.code == 2
        assert f"argument --timeout: must be a number of seconds >= 1 (got {value})" in (
            capsys.readouterr().err
        )


def test_a_config_timeout_below_a_second_is_refused(dataset, tmp_path, capsys):  # noqa: F811
    config = write_config(
        tmp_path / "full.yaml",
        data={"graphs": str(dataset["graphs"])},
        run={"dir": str(tmp_path / "run"), "timeout_s": 0.5},
    )
    assert main(["train", "--config", str(config)]) == 2
    assert "run.timeout_s must be >= 1 [s] (got 0.5)" in _one_error_line(capsys)
