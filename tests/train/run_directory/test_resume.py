"""Resume honours the checkpoint's trajectory or refuses: a halo checkpoint resumes exactly at
another P and in full mode; a changed setting that shapes the trajectory (learning rate, graph
groups, ...) is one line naming it, exit 2, before anything is written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from partgnn.cli.main import main
from partgnn.train.run_directory.training_checkpoint import TrainingCheckpoint
from tests.distributed.launch import launch
from tests.train.conftest import dataset, write_config  # noqa: F401 (the fixture)
from tests.train.test_trainer import _metrics, _train, _weights

COMMON = {"data": {"val_events": 1}, "optim": {"epochs": 2}}


@pytest.fixture(scope="module")
def whole_run(dataset, tmp_path_factory) -> dict[str, Path]:  # noqa: F811
    """A halo run on 2 ranks with a checkpoint every 2 steps, and a copy stopped at step 2."""
    tmp = tmp_path_factory.mktemp("resume")
    whole = tmp / "whole"
    config = write_config(
        tmp / "whole.yaml", mode="halo", data={"shards": str(dataset["phi2"])},
        optim=COMMON["optim"], run={"dir": str(whole), "checkpoint_every": 2},
    )  # fmt: skip
    _train(2, config, tmp)
    return {"whole": whole, "step2": whole / "checkpoints" / "step-0000002.pt"}


def _interrupted(whole_run: dict[str, Path], folder: Path) -> Path:
    (folder / "checkpoints").mkdir(parents=True)
    shutil.copy(whole_run["step2"], folder / "checkpoints" / "last.pt")
    return folder


def _resume_config(dataset, run: Path, mode: str) -> Path:  # noqa: F811
    """A config resuming in ``run`` in ``mode`` (halo on the P = 2 shards, else the graphs)."""
    data = (
        {"shards": str(dataset["phi2"])} if mode == "halo" else {"graphs": str(dataset["graphs"])}
    )
    return write_config(
        run.with_suffix(".yaml"), mode=mode, data=data, optim=COMMON["optim"],
        run={"dir": str(run), "checkpoint_every": 2},
    )  # fmt: skip


@pytest.mark.slow
def test_resumed_run_ends_with_identical_weights(dataset, whole_run, tmp_path):  # noqa: F811
    # The same run, interrupted after its step-2 checkpoint: only that checkpoint survives.
    run = _interrupted(whole_run, tmp_path / "interrupted")
    config = _resume_config(dataset, run, "halo")
    _train(2, config, tmp_path, "--resume")
    expected, resumed = _weights(whole_run["whole"]), _weights(run)
    for name, tensor in expected.items():
        assert torch.equal(resumed[name], tensor), name
    columns = ("epoch", "step", "lr", "train_loss", "val_loss", "val_efficiency", "val_purity")
    rows = [[r[c] for c in columns] for r in _metrics(run)]
    assert rows == [[r[c] for c in columns] for r in _metrics(whole_run["whole"])]


@pytest.mark.slow
def test_a_halo_checkpoint_resumes_exactly_in_full_mode(dataset, whole_run, tmp_path):  # noqa: F811
    run = _interrupted(whole_run, tmp_path / "full")
    config = _resume_config(dataset, run, "full")
    assert main(["train", "--config", str(config), "--resume"]) == 0
    expected, resumed = _weights(whole_run["whole"]), _weights(run)
    for name, tensor in expected.items():
        error = ((resumed[name] - tensor).norm() / tensor.norm().clamp(min=1e-300)).item()
        assert error < 1e-12, (name, error)


@pytest.mark.slow
def test_a_changed_trajectory_setting_is_refused_naming_it(dataset, whole_run, tmp_path, capsys):  # noqa: F811
    run = _interrupted(whole_run, tmp_path / "lr")
    config = _resume_config(dataset, run, "full")
    saved = TrainingCheckpoint.load(run / "checkpoints" / "last.pt")
    assert saved.trajectory["events per step"] == 1
    code = main(["train", "--config", str(config), "--resume", "--set", "optim.lr=0.5",
                 "--set", "run.seed=9"])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "optim.lr 0.003 -> 0.5" in err[0] and "run.seed 0 -> 9" in err[0]
    assert "run.init_from=" in err[0]
    assert not (run / "config.yaml").exists()  # refused before anything was written


@pytest.mark.slow
def test_more_graph_groups_on_resume_are_refused_on_every_rank(dataset, whole_run, tmp_path):  # noqa: F811
    # The case: a run of one graph group resumed as data-parallel replicas would
    # recompute its schedule (fewer total steps); here 1 event per step becomes 2 (ddp).
    run = _interrupted(whole_run, tmp_path / "ddp")
    config = _resume_config(dataset, run, "ddp")
    results = launch(2, "partgnn", ["train", "--config", str(config), "--resume"],
                     workdir=tmp_path / "logs")  # fmt: skip
    for result in results:
        assert result.returncode == 2, result.stderr[-2000:]
        lines = [line for line in result.stderr.splitlines() if line.startswith("partgnn:")]
        assert len(lines) == 1 and "events per step 1 -> 2" in lines[0], result.stderr[-2000:]
        assert "mode 'full graph' -> 'ddp'" in lines[0]
