"""Checkpoint files that are not partgnn's are refused with one InputError, whatever they hold."""

from __future__ import annotations

import random

import pytest
import torch

from partgnn.errors import InputError
from partgnn.train.run_directory.checkpoints import TRAINING_STATE, load_checkpoint


@pytest.mark.parametrize("seed", range(50))
def test_random_bytes_are_one_input_error(tmp_path, seed):
    path = tmp_path / "c.pt"
    path.write_bytes(random.Random(seed).randbytes(random.Random(seed).randint(1, 20000)))
    with pytest.raises(
        InputError, match=r"c\.pt: (refused, not a plain|not a readable) checkpoint"
    ):
        load_checkpoint(path)


def test_a_truncated_checkpoint_is_one_input_error(tmp_path):
    path = tmp_path / "c.pt"
    torch.save({"model": {"w": torch.ones(1000)}, "config": {}}, path)
    path.write_bytes(path.read_bytes()[:3000])
    with pytest.raises(InputError, match="not a readable checkpoint"):
        load_checkpoint(path)


def test_required_keys_are_named(tmp_path):
    path = tmp_path / "c.pt"
    torch.save({"model": {}, "config": {}}, path)
    assert load_checkpoint(path).keys() == {"model", "config"}
    with pytest.raises(InputError, match=r"lacks 'optimizer', 'scheduler', 'epoch'"):
        load_checkpoint(path, required=TRAINING_STATE)
    torch.save([1, 2], path)
    with pytest.raises(InputError, match="not a partgnn checkpoint \\(holds a list\\)"):
        load_checkpoint(path)
