"""A run whose loss, gradients or weights stop being finite stops with one line and exit 1,
before the update that would spread it; its checkpoints stay finite; infer refuses a checkpoint
with non-finite weights."""

from __future__ import annotations

import math

import torch

from partgnn.cli.main import main
from partgnn.resources import resolve_checkpoint
from partgnn.train.run_directory.saved_model import SavedModel
from tests.train.conftest import dataset, write_config  # noqa: F401 (the fixture)


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("partgnn: error: "), err
    return err[0]


def test_a_diverging_run_stops_with_one_line_and_keeps_its_checkpoint_finite(
    dataset,  # noqa: F811
    tmp_path,
    capsys,
):
    run = tmp_path / "run"
    config = write_config(
        tmp_path / "diverge.yaml",
        data={"graphs": str(dataset["graphs"])},
        optim={"epochs": 20, "lr": 1e30, "warmup_steps": 0},
        run={"dir": str(run), "checkpoint_every": 1},
    )
    assert main(["train", "--config", str(config)]) == 1
    line = _one_line(capsys)
    assert "training diverged" in line and "lower optim.lr" in line, line
    assert "PARTGNN_DEBUG" not in line  # partgnn's own message: no traceback hint
    step = int(line.split("step ", 1)[1].split(":", 1)[0])
    assert step < 60, line  # stopped at once, not after the 60 steps asked for
    for checkpoint in (run / "checkpoints").glob("*.pt"):
        saved = SavedModel.read(checkpoint)  # refuses non-finite weights
        assert all(torch.isfinite(w).all() for w in saved.weights.values())


def test_infer_refuses_non_finite_weights(dataset, tmp_path, capsys):  # noqa: F811
    state = torch.load(resolve_checkpoint("pretrained:trackml-pt1"), weights_only=True)
    name = next(iter(state["model"]))
    state["model"][name] = state["model"][name].clone().fill_(math.nan)
    bad = tmp_path / "nan.pt"
    torch.save(state, bad)
    code = main(["infer", "--checkpoint", str(bad), "--graphs", str(dataset["graphs"]), "--out",
                 str(tmp_path / "scores.h5"), "--device", "cpu"])  # fmt: skip
    assert code == 2
    assert f"model weight {name} is not finite" in _one_line(capsys)
    assert not (tmp_path / "scores.h5").exists()
