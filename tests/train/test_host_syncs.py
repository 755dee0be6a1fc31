"""Host synchronisations per training step (issue 25): counted on the CPU, halo mode on 2 ranks,
with communication hiding and checkpointing on and off (tests/train/host_sync_worker.py)."""

from __future__ import annotations

import json

import pytest
import torch

from tests.distributed.launch import assert_all_succeeded, launch
from tests.host_syncs import HostSyncCounter

#: What one training step may read on the host, named: the step's loss and the agreed stop
#: signal, reduced together and read once (the log and progress bar print the loss every step).
BUDGET_PER_STEP = {"tolist": 1.0}


def test_the_counter_sees_every_kind_of_host_read():
    x = torch.randn(8)
    with HostSyncCounter() as counter:
        mask = x > 0
        x[mask]
        x.nonzero()
        float(x.sum())
        bool(mask.any())
        x.tolist()
        x.cpu()
        with HostSyncCounter.paused():
            x.tolist()
        x.index_select(0, torch.tensor([1, 2]))  # not a host read
    assert counter.counts == {
        "boolean mask": 1, "nonzero": 1, "item": 2, "tolist": 1, "cpu": 1,
    }  # fmt: skip


@pytest.mark.slow
def test_a_halo_training_step_reads_the_host_once(dataset, tmp_path):
    results = launch(
        2,
        "tests.train.host_sync_worker",
        [str(dataset["graphs"]), str(dataset["phi2"]), str(tmp_path)],
        workdir=tmp_path / "logs",
    )
    assert_all_succeeded(results)
    for rank in (0, 1):
        per_step = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert len(per_step) == 4
        for setting, counts in per_step.items():
            assert counts == BUDGET_PER_STEP, (rank, setting)
