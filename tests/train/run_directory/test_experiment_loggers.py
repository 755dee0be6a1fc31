"""``run.loggers``: Weights & Biases (offline) and MLflow (a file store in the run folder) get
what TensorBoard gets, with no network; an unknown or missing logger is one line."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from partgnn.cli.main import main
from tests.train.conftest import write_config

pytest.importorskip("wandb")
pytest.importorskip("mlflow")


def _tensorboard_scalars(folder: Path) -> dict[tuple[str, int], float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    return {(tag, e.step): e.value for tag in events.Tags()["scalars"]
            for e in events.Scalars(tag)}  # fmt: skip


def _wandb_scalars(run_dir: Path) -> tuple[dict[tuple[str, int], float], dict]:
    """The history and config records of the offline run's ``.wandb`` file (LevelDB-style log
    records of W&B's protobuf ``Record``s)."""
    from wandb.proto import wandb_internal_pb2

    (path,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    data, block, position = path.read_bytes(), 32768, 7  # (a 7-byte W&B header first)
    assert data[:4] == b":W&B"
    records, pending = [], b""
    while position + 7 <= len(data):
        left = block - position % block
        if left < 7:
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if kind == 0 and length == 0:
            position += left
            continue
        payload = data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind == 1:
            records.append(payload)
        elif kind in (2, 3):
            pending += payload
        else:
            records.append(pending + payload)
            pending = b""
    scalars, config = {}, {}
    for raw in records:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            items = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json)
                     for i in record.history.item}  # fmt: skip
            step = items.pop("_step", record.history.step.num)
            scalars.update({(k, step): v for k, v in items.items() if not k.startswith("_")})
        elif record.WhichOneof("record_type") in ("config", "run"):
            updates = (record.config if record.HasField("config") else record.run.config).update
            config.update({i.key: json.loads(i.value_json) for i in updates})
    return scalars, config


def _mlflow_scalars(run_dir: Path) -> tuple[dict[tuple[str, int], float], dict[str, str]]:
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=(run_dir / "mlruns").resolve().as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("partgnn").experiment_id])
    scalars = {
        (name, m.step): m.value
        for name in run.data.metrics
        for m in client.get_metric_history(run.info.run_id, name)
    }
    return scalars, run.data.params


def test_wandb_and_mlflow_get_what_tensorboard_gets(dataset, tmp_path: Path, monkeypatch):
    for name in ("WANDB_MODE", "WANDB_PROJECT", "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    run_dir = tmp_path / "run"
    config = write_config(tmp_path / "run.yaml", data={"graphs": str(dataset["graphs"])},
                          optim={"epochs": 2}, run={"dir": str(run_dir), "tensorboard": True,
                                                    "loggers": ["wandb", "mlflow"]})  # fmt: skip
    assert main(["train", "--config", str(config)]) == 0
    board = _tensorboard_scalars(run_dir / "tb")
    assert len(board) > 10 and ("epoch/train_loss", 6) in board
    wandb_scalars, wandb_config = _wandb_scalars(run_dir)
    mlflow_scalars, params = _mlflow_scalars(run_dir)
    for tracked in (wandb_scalars, mlflow_scalars):
        assert tracked.keys() == board.keys()
        differ = {
            k: (tracked[k], v)
            for k, v in board.items()
            if tracked[k] != pytest.approx(v, rel=1e-6, nan_ok=True)
        }
        assert not differ, differ
    assert wandb_config["optim"]["epochs"] == 2 and params["optim.epochs"] == "2"


@pytest.mark.parametrize(
    ("loggers", "said"),
    [
        (["neptune"], "run.loggers: 'neptune' is not one of wandb, mlflow"),
        (["wandb"], "run.loggers: wandb is not installed: pip install 'partgnn[wandb]'"),
    ],
)
def test_an_unknown_or_missing_logger_is_one_line(loggers, said, dataset, tmp_path, capsys,
                                                  monkeypatch):  # fmt: skip
    import importlib.util

    if loggers == ["wandb"]:  # as on a machine without the extra
        found = importlib.util.find_spec

        def without_wandb(name, *args):
            return None if name == "wandb" else found(name, *args)

        monkeypatch.setattr(importlib.util, "find_spec", without_wandb)
    config = write_config(tmp_path / "run.yaml", data={"graphs": str(dataset["graphs"])},
                          run={"dir": str(tmp_path / "run"), "loggers": loggers})  # fmt: skip
    assert main(["train", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and said in err, err
    assert not (tmp_path / "run").exists()
