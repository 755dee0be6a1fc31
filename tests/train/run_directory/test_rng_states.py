"""Generator states in checkpoints, and the deterministic-kernels option (issue 25, item 11)."""

from __future__ import annotations

import pytest
import torch

from partgnn.distributed.process_group import destroy_distributed, init_distributed
from partgnn.train.config.config_file import load_config
from partgnn.train.run_directory.training_checkpoint import TrainingCheckpoint
from partgnn.train.trainer import Trainer
from tests.train.conftest import write_config


@pytest.fixture
def context():
    context = init_distributed(device="cpu", timeout_s=60)
    yield context
    destroy_distributed(context)


def _config(dataset, tmp_path, **run):
    return load_config(
        write_config(
            tmp_path / "run.yaml",
            data={"graphs": str(dataset["graphs"])},
            optim={"epochs": 1, "max_steps": 2},
            run={"dir": str(tmp_path / "run"), **run},
        )
    )


def test_a_resumed_run_continues_from_the_saved_generator_states(dataset, tmp_path, context):
    config = _config(dataset, tmp_path)
    Trainer(config, context).fit()
    at_checkpoint = torch.get_rng_state()
    saved = TrainingCheckpoint.load(tmp_path / "run" / "checkpoints" / "last.pt").rng_states
    assert len(saved) == 1 and torch.equal(saved[0]["cpu"], at_checkpoint)
    trainer = Trainer(config, context)  # seeds the generators again
    torch.rand(100)
    assert not torch.equal(torch.get_rng_state(), at_checkpoint)
    trainer._resume(tmp_path / "run" / "checkpoints" / "last.pt")
    assert torch.equal(torch.get_rng_state(), at_checkpoint)


def test_deterministic_kernels_only_while_the_trainer_trains(dataset, tmp_path, context):
    """run.deterministic holds while fit() runs; the process's setting is restored after."""
    seen = []
    trainer = Trainer(_config(dataset, tmp_path, deterministic=True), context)
    assert not torch.are_deterministic_algorithms_enabled()  # not yet: building changes nothing
    train_step = trainer._train_step

    def recording_step(*args):
        seen.append(torch.are_deterministic_algorithms_enabled())
        return train_step(*args)

    trainer._train_step = recording_step
    trainer.fit()
    assert seen and all(seen)
    assert not torch.are_deterministic_algorithms_enabled()
