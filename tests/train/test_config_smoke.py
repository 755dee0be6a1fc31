"""Every shipped run config trains for one step (on a tiny dataset, in this process)."""

from __future__ import annotations

from pathlib import Path

import pytest

from partgnn.distributed.process_group import destroy_distributed, init_distributed
from partgnn.resources import configs_dir
from partgnn.train.config.config_file import load_config
from partgnn.train.trainer import Trainer

CONFIGS = sorted(configs_dir().glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_config_trains_one_step(dataset, tmp_path, path: Path):
    config = load_config(
        path,
        [
            f"data.graphs={dataset['graphs']}",
            f"data.shards={dataset['phi1']}",
            f"data.boundary_shards={dataset['phi1']}",
            "optim.max_steps=1",
            "data.val_events=1",  # the dataset holds 4 events
            f"run.dir={tmp_path / 'run'}",
            "run.device=cpu",
            "run.progress=false",
        ],
    )
    context = init_distributed(device="cpu", timeout_s=60)
    try:
        summary = Trainer(config, context).fit()
    finally:
        destroy_distributed(context)
    assert summary.steps == 1
    assert (tmp_path / "run" / "checkpoints" / "last.pt").exists()
    assert (tmp_path / "run" / "summary.json").exists()
    assert (tmp_path / "run" / "config.yaml").exists()
    final = summary.final
    assert final.train_loss == final.train_loss  # not NaN
    if config.run.tensorboard:
        assert any((tmp_path / "run" / "tb").iterdir())


def test_bf16_autocast_and_checkpointing_train(dataset, tmp_path):
    config = load_config(
        "full",
        [
            f"data.graphs={dataset['graphs']}",
            "data.boundary_shards=null",
            "optim.max_steps=2",
            "data.val_events=1",
            f"run.dir={tmp_path / 'run'}",
            "run.device=cpu",
            "run.bf16=true",
            "model.recompute=true",
            "run.progress=false",
            "run.tensorboard=false",
        ],
    )
    context = init_distributed(device="cpu", timeout_s=60)
    try:
        summary = Trainer(config, context).fit()
    finally:
        destroy_distributed(context)
    assert summary.steps == 2
    assert summary.final.train_loss > 0
