"""Shared data of the command tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from partgnn.cli.main import main


@pytest.fixture(scope="session")
def tiny_pipeline(tmp_path_factory) -> Path:
    """A folder with ``events.h5`` (2 simulated pile-up-2 events) and their pT > 1 GeV
    ``graphs.h5``, made once through the commands."""
    folder = tmp_path_factory.mktemp("tiny-pipeline")
    events, graphs = folder / "events.h5", folder / "graphs.h5"
    assert main(["simulate", "--events", "2", "--pileup", "2", "--seed", "3", "--out",
                 str(events)]) == 0  # fmt: skip
    assert main(["build-graphs", str(events), "--pt-min", "1.0", "--out", str(graphs)]) == 0
    return folder
