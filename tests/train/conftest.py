"""A tiny dataset for training tests: simulated events, graphs, and phi shards for 1-3 ranks."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from partgnn.data.detector.geometry import default_geometry
from partgnn.data.files.writers import write_graphs
from partgnn.data.graphs.graph_builder import GraphBuildConfig, build_event_graph
from partgnn.data.simulation.simulate import SimulationConfig, simulate_event
from partgnn.partition.event_split import PartitionOptions
from partgnn.partition.shard_writer import write_shards


@pytest.fixture(scope="session")
def dataset(tmp_path_factory) -> dict[str, Path]:
    """4 pile-up-3 events without pT cut; phi shards for P = 1, 2, 3, 4."""
    folder = tmp_path_factory.mktemp("train-data")
    geometry = default_geometry()
    graphs = (
        build_event_graph(
            simulate_event(geometry, SimulationConfig(pileup=3), event_id=i, seed=7),
            geometry,
            GraphBuildConfig(pt_min=0.0),
        )
        for i in range(4)
    )
    paths = {"graphs": folder / "graphs.h5"}
    write_graphs(paths["graphs"], ((g, q.to_dict()) for g, q in graphs))
    for n_parts in (1, 2, 3, 4):
        paths[f"phi{n_parts}"] = folder / f"phi{n_parts}"
        write_shards(
            paths["graphs"],
            paths[f"phi{n_parts}"],
            PartitionOptions(n_parts=n_parts, method="phi"),
            progress=False,
        )
    return paths


def write_config(path: Path, **sections) -> Path:
    """A small training config: 4-step IN, H = 16, float64 on the CPU (as the in-process
    references compute, also on a machine with GPUs), no progress bar or TensorBoard."""
    config = {
        "mode": "full",
        "data": {"val_events": 1},
        "model": {"hidden": 16, "steps": 3},
        "optim": {"epochs": 1, "lr": 0.003, "warmup_steps": 1},
        "run": {"device": "cpu", "dtype": "float64", "progress": False, "tensorboard": False},
    }
    for name, values in sections.items():
        if isinstance(values, dict):
            config.setdefault(name, {}).update(values)
        else:
            config[name] = values
    path.write_text(yaml.safe_dump(config))
    return path


def train_full_mode(config: Path) -> Path:
    """Trains ``config`` in this process (one rank on the CPU); returns its run directory (the
    config's path without suffix, as :func:`write_config`'s callers name it)."""
    from partgnn.distributed.process_group import destroy_distributed, init_distributed
    from partgnn.train.config.config_file import load_config
    from partgnn.train.trainer import Trainer

    context = init_distributed(device="cpu", timeout_s=60)
    try:
        Trainer(load_config(config), context).fit()
    finally:
        destroy_distributed(context)
    return config.with_suffix("")


#: The smallest probe graphs whose edge MLPs still run in chunks of E / 16: half the planner's
#: (``footprint.PROBE_GRAPHS``, which tests/train/planning/test_footprint.py checks). Tests of plans
#: check their tables and choices, not the fit's precision (about half the time).
SMALL_PROBE_GRAPHS = ((4_096, 32_768), (2_048, 32_768), (4_096, 65_536))


def probes_at_test_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """The planner's probes at test size: :data:`SMALL_PROBE_GRAPHS`, and a held-bytes probe of
    2**20 bytes of edges (an event-sized one, ~1e6 edges, is the benchmark's)."""
    from partgnn.train.planning import footprint

    monkeypatch.setattr(footprint, "RESIDENT_PROBE_EDGE_BYTES", 2**20)
    monkeypatch.setattr(footprint, "PROBE_GRAPHS", SMALL_PROBE_GRAPHS)
