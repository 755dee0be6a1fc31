"""A small real pipeline for the reliability suite: events, graphs, phi shards, a checkpoint,
scores, each made once per session by the ``partgnn`` command's entry point."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from partgnn.cli.main import main
from tests.distributed.launch import child_env
from tests.forkserver import run_module
from tests.train.conftest import write_config


def run_partgnn(*args: str, env: dict[str, str] | None = None, timeout: float = 300):
    """Runs ``python -m partgnn *args`` and returns the finished process (text output; forked
    by the worker's fork server, :mod:`tests.forkserver`)."""
    return run_module("partgnn", list(args), env=child_env(**(env or {})), timeout=timeout)


def run_partgnn_in_process(*args: str, capfd) -> subprocess.CompletedProcess:
    """``partgnn *args`` through the command's entry point in this process (no process start),
    as a finished process: its exit code and what it wrote to stdout and stderr (captured at
    the file descriptors by pytest's ``capfd``)."""
    capfd.readouterr()
    code = main(list(args))
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess(["partgnn", *args], code, out, err)


@pytest.fixture(scope="session")
def pipeline(tmp_path_factory) -> dict[str, Path]:
    """events.h5, graphs.h5, shards-phi2/, run/checkpoints/last.pt, scores.h5 and more events."""
    root = tmp_path_factory.mktemp("pipeline")
    paths = {
        "events": root / "events.h5",
        "other_events": root / "other-events.h5",
        "graphs": root / "graphs.h5",
        "shards": root / "shards-phi2",
        "run": root / "run",
        "scores": root / "scores.h5",
    }
    steps = [
        ("simulate", "--events", "4", "--pileup", "3", "--seed", "7", "--out", paths["events"]),
        ("simulate", "--events", "4", "--pileup", "3", "--seed", "8", "--out",
         paths["other_events"]),
        ("build-graphs", paths["events"], "--pt-min", "0", "--out", paths["graphs"]),
        ("partition", paths["graphs"], "--parts", "2", "--method", "phi", "--out",
         paths["shards"]),
    ]  # fmt: skip
    config = write_config(
        root / "full.yaml",
        data={"graphs": str(paths["graphs"])},
        optim={"max_steps": 2},
        run={"dir": str(paths["run"])},
    )
    paths["config"] = config
    paths["checkpoint"] = paths["run"] / "checkpoints" / "last.pt"
    steps += [
        ("train", "--config", config),
        ("infer", "--checkpoint", paths["checkpoint"], "--graphs", paths["graphs"], "--out",
         paths["scores"]),
    ]  # fmt: skip
    # In this process, through the command line's entry point: the same files, without a
    # process start (~3 s) per command.
    for step in steps:
        assert main([str(arg) for arg in step]) == 0, step
    return paths
