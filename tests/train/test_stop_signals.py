"""Tests of partgnn.train.stop_signals: a stop signal is recorded, and a run stops on it."""

from __future__ import annotations

import os
import signal

from partgnn.distributed.process_group import destroy_distributed, init_distributed
from partgnn.train.config.config_file import load_config
from partgnn.train.stop_signals import StopSignals, signal_name
from partgnn.train.trainer import Trainer
from tests.train.conftest import write_config


def test_a_stop_signal_is_recorded_within_and_the_handler_restored_after():
    previous = signal.getsignal(signal.SIGUSR1)
    with StopSignals() as stop:
        os.kill(os.getpid(), signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGTERM)  # the first one counts
    assert signal_name(stop.received) == "SIGUSR1"
    assert signal.getsignal(signal.SIGUSR1) is previous


def test_a_signal_held_before_training_stops_the_run_after_its_first_step(dataset, tmp_path):
    # What `partgnn train` does: it holds the signals from its start, setup included.
    config = write_config(
        tmp_path / "run.yaml",
        data={"graphs": str(dataset["graphs"])},
        optim={"epochs": 5},
        run={"dir": str(tmp_path / "run")},
    )
    with StopSignals() as stop:
        os.kill(os.getpid(), signal.SIGUSR1)
        context = init_distributed(device="cpu", timeout_s=60)
        try:
            summary = Trainer(load_config(config), context).fit(stop=stop)
        finally:
            destroy_distributed(context)
    assert summary.stopped_by == "SIGUSR1" and summary.steps == 1
    assert (tmp_path / "run" / "checkpoints" / "last.pt").exists()
    assert not (tmp_path / "run" / "summary.json").exists()  # not finished
