"""No run is lost: a run directory that holds a run is continued, replaced on request, or refused;
a finished run resumed is left as it is; step checkpoints are bounded."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from partgnn.cli.main import main
from partgnn.train.run_directory.existing_run import clear_run, existing_run
from tests.distributed.launch import REPOSITORY, child_env, free_port
from tests.forkserver import forked_python
from tests.train.conftest import write_config


def _config(tmp_path: Path, dataset, **run) -> Path:
    return write_config(
        tmp_path / "full.yaml",
        data={"graphs": str(dataset["graphs"])},
        optim={"epochs": 2},
        run={"dir": str(tmp_path / "run"), "checkpoint_every": 1, **run},
    )


def _files(run: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(run)): p.read_bytes()
        for p in sorted(run.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


@pytest.fixture
def finished_run(dataset, tmp_path, capsys) -> tuple[Path, Path, dict[str, bytes]]:
    """A config, the finished 6-step run it trained, and the run's files."""
    config = _config(tmp_path, dataset)
    assert main(["train", "--config", str(config)]) == 0
    capsys.readouterr()
    return config, tmp_path / "run", _files(tmp_path / "run")


def test_a_second_run_into_a_run_directory_is_refused(finished_run, capsys):
    config, run, before = finished_run
    assert main(["train", "--config", str(config), "--set", "optim.max_steps=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"partgnn: error: {run}: holds a run (finished, 6 steps); continue it with --resume, or "
        "start a new one there with --replace (removes the old run's files)"
    ]
    assert _files(run) == before


def test_replace_removes_the_old_run_first(finished_run, capsys):
    config, run, _ = finished_run
    (run / "scores.h5").write_bytes(b"a user's file")
    (run / "checkpoints" / "best-by-hand.pt").write_bytes(b"a user's checkpoint")
    (run / "tb" / "mine").mkdir(parents=True)
    (run / "tb" / "mine" / "plot.txt").write_text("a user's note")
    assert main(["train", "--config", str(config), "--replace", "--set", "optim.max_steps=2"]) == 0
    assert (
        f"partgnn: train: kept checkpoints/best-by-hand.pt, tb/mine/plot.txt in {run} (not "
        "written by a run)"
    ) in capsys.readouterr().err.splitlines()
    assert (run / "checkpoints" / "best-by-hand.pt").read_bytes() == b"a user's checkpoint"
    assert (run / "tb" / "mine" / "plot.txt").read_text() == "a user's note"
    steps = sorted(p.name for p in (run / "checkpoints").glob("step-*.pt"))
    assert steps == ["step-0000001.pt", "step-0000002.pt"]  # none of the old run's
    assert json.loads((run / "summary.json").read_text())["steps"] == 2
    assert (run / "scores.h5").read_bytes() == b"a user's file"


def test_resume_and_replace_together_are_a_usage_error(dataset, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--config", str(_config(tmp_path, dataset)), "--resume", "--replace"])
    assert exit_.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_resuming_a_finished_run_changes_nothing(finished_run, capsys):
    config, run, before = finished_run
    assert main(["train", "--config", str(config), "--resume", "auto"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [f"{run}: the run is finished (6 of 6 steps); nothing changed (--replace "
                   "starts it anew)"]  # fmt: skip
    assert _files(run) == before


def test_a_run_stopped_at_its_last_step_gets_its_summary(finished_run):
    """A run stopped after its last step's checkpoint, before the final evaluation: the resume
    evaluates and writes the summary, with the wall time of both sittings."""
    config, run, _ = finished_run
    first = json.loads((run / "summary.json").read_text())
    (run / "summary.json").unlink()
    assert main(["train", "--config", str(config), "--resume", "auto"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["final"]["val_efficiency"] == first["final"]["val_efficiency"]
    assert summary["wall_time_s"] >= first["wall_time_s"] * 0.5


def test_step_checkpoints_are_bounded_and_resume_still_falls_back(dataset, tmp_path):
    config = _config(tmp_path, dataset, keep_checkpoints=2)
    assert main(["train", "--config", str(config), "--set", "optim.max_steps=4"]) == 0
    checkpoints = tmp_path / "run" / "checkpoints"
    assert sorted(p.name for p in checkpoints.glob("*.pt")) == [
        "last.pt", "step-0000003.pt", "step-0000004.pt"
    ]  # fmt: skip


def test_remnants_of_a_run_without_checkpoint_are_cleared(dataset, tmp_path):
    run = tmp_path / "run"
    (run / "tb").mkdir(parents=True)
    (run / "tb" / "events.out.tfevents.1733.host.1.0").write_text("old")
    (run / "config.yaml").write_text("old")
    (run / "metrics.csv").write_text("epoch,step\n")  # a header, no row
    assert existing_run(run) is None
    assert main(["train", "--config", str(_config(tmp_path, dataset, tensorboard=False)),
                 "--set", "optim.max_steps=1"]) == 0  # fmt: skip
    assert not (run / "tb").exists()


def test_clear_run_keeps_other_files(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.pt").write_bytes(b"x")
    (tmp_path / "summary.json").write_text("{}")
    (tmp_path / "evaluation.json").write_text("{}")
    removed = clear_run(tmp_path)
    assert sorted(p.name for p in removed) == ["checkpoints", "summary.json"]
    assert (tmp_path / "evaluation.json").exists()


@pytest.mark.parametrize(("val_events", "message"), [(4, "holds 4 events, so data.val_events 4")])
def test_a_validation_split_the_data_cannot_hold_is_refused(
    dataset,
    tmp_path,
    capsys,
    val_events,
    message,
):
    config = _config(tmp_path, dataset)
    assert main(["train", "--config", str(config), "--set", f"data.val_events={val_events}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and "at most 3" in err[0], err
    assert not (tmp_path / "run").exists()


def test_training_without_validation_says_so(dataset, tmp_path, capsys):
    config = _config(tmp_path, dataset)
    argv = ["train", "--config", str(config), "--set", "data.val_events=0", "--set",
            "optim.max_steps=1"]  # fmt: skip
    assert main(argv) == 0
    assert "warning: data.val_events is 0: no validation" in capsys.readouterr().err


@pytest.mark.slow
def test_under_torchrun_a_run_is_refused_on_every_rank_and_a_finished_one_kept(
    dataset,
    tmp_path,
):
    config = write_config(
        tmp_path / "halo.yaml",
        mode="halo",
        data={"shards": str(dataset["phi2"])},
        optim={"max_steps": 2},
        run={"dir": str(tmp_path / "run")},
    )

    def torchrun(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [forked_python(), "-m", "torch.distributed.run", "--nproc-per-node", "2",
             "--master-port", str(free_port()), "-m", "partgnn", "train", "--config",
             str(config), *extra],
            capture_output=True, text=True, cwd=REPOSITORY, env=child_env(), timeout=180,
        )  # fmt: skip

    first = torchrun()
    assert first.returncode == 0, first.stderr[-3000:]
    run = tmp_path / "run"
    before = _files(run)
    again = torchrun()
    line = (
        f"partgnn: error: {run}: holds a run (finished, 2 steps); continue it with --resume, or "
        "start a new one there with --replace (removes the old run's files)"
    )
    assert again.returncode == 1, again.stderr[-3000:]  # torchrun's own status
    # torchrun's report gives each failed rank's line
    assert again.stderr.splitlines().count(f"  traceback : {line}") == 2, again.stderr[-3000:]
    resumed = torchrun("--resume", "auto")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "the run is finished (2 of 2 steps); nothing changed" in resumed.stdout
    assert _files(run) == before


def test_replace_removes_only_what_a_run_wrote_in_its_folders(tmp_path):
    from partgnn.train.run_directory.existing_run import kept_in_run_folders

    checkpoints, tb = tmp_path / "checkpoints", tmp_path / "tb"
    (tb / "mine").mkdir(parents=True)
    checkpoints.mkdir()
    for name in ("last.pt", "step-0000040.pt", ".last.pt.host.123.abc.tmp", "best-by-hand.pt"):
        (checkpoints / name).write_bytes(b"x")
    (tb / "events.out.tfevents.1733.host.1.0").write_bytes(b"x")
    (tb / "mine" / "plot.txt").write_text("mine")
    (tb / "mine" / "events.out.tfevents.1733.host.2.0").write_bytes(b"x")
    removed = clear_run(tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in removed) == [
        "checkpoints/.last.pt.host.123.abc.tmp", "checkpoints/last.pt",
        "checkpoints/step-0000040.pt", "tb/events.out.tfevents.1733.host.1.0",
        "tb/mine/events.out.tfevents.1733.host.2.0",
    ]  # fmt: skip
    left = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert left == ["checkpoints/best-by-hand.pt", "tb/mine/plot.txt"]
    assert [p.name for p in kept_in_run_folders(tmp_path)] == ["best-by-hand.pt", "plot.txt"]
