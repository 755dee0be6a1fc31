"""run.init_from: a run starts from a checkpoint's weights (a path or a shipped model)."""

from __future__ import annotations

import pytest
import torch

from partgnn.distributed.process_group import destroy_distributed, init_distributed
from partgnn.errors import InputError
from partgnn.train.config.config_file import load_config
from partgnn.train.run_directory.saved_model import SavedModel
from partgnn.train.trainer import Trainer
from tests.train.conftest import write_config


def _trainer(config_path) -> Trainer:
    context = init_distributed(device="cpu", timeout_s=60)
    try:
        return Trainer(load_config(config_path), context)
    finally:
        destroy_distributed(context)


def _graphs_config(tmp_path, dataset, name, **sections):
    run = {"dir": str(tmp_path / name), **sections.pop("run", {})}
    return write_config(
        tmp_path / f"{name}.yaml", data={"graphs": str(dataset["graphs"])}, run=run, **sections
    )


def test_a_run_starts_from_the_shipped_model(dataset, tmp_path):
    pretrained = SavedModel.read("pretrained:trackml-pt1")
    # Fused kernels and activation checkpointing change how, not what, the model computes.
    # Its config names recomputation by its old name, model.checkpoint (read as recompute).
    saved = {k: v for k, v in pretrained.config["model"].items() if k != "checkpoint"}
    model = dict(saved, fused=False, recompute=True)
    config = _graphs_config(
        tmp_path,
        dataset,
        "fine-tune",
        model=model,
        run={"init_from": "pretrained:trackml-pt1", "dtype": "float32"},
    )
    trainer = _trainer(config)
    for name, tensor in trainer.model.state_dict().items():
        # The input standardisation too: the weights were learned for its scalings.
        assert torch.equal(tensor, pretrained.weights[name]), name
    assert trainer.feature_statistics is None


def test_a_checkpoint_of_another_model_is_one_line(dataset, tmp_path):
    config = _graphs_config(
        tmp_path,
        dataset,
        "other",
        model={"hidden": 8},
        run={"init_from": "pretrained:trackml-pt1"},
    )
    expected = r"^run.init_from pretrained:trackml-pt1: the checkpoint.s model settings differ: "
    expected += r"activation 'silu', not 'relu', hidden 64, not 8, .*steps 8, not 3"
    with pytest.raises(InputError, match=expected):
        _trainer(config)
    missing = _graphs_config(
        tmp_path, dataset, "missing", run={"init_from": str(tmp_path / "none.pt")}
    )
    with pytest.raises(InputError, match="checkpoint not found"):
        _trainer(missing)
