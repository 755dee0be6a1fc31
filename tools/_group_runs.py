"""Events of varied pile-up and halo training runs with several graph groups: what the
benchmarks of issue 13 (bench_balance, bench_lr_scaling) run."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml
from _common import torchrun


def write_varied_events(
    folder: Path, *, events: int, pileup: tuple[int, int], pt_min: float, parts: int, seed: int
) -> tuple[Path, list[int]]:
    """Simulates ``events`` events with a whole pile-up drawn uniformly in ``pileup``
    (inclusive, seeded), builds their graphs and partitions them with METIS into ``parts``.

    Returns:
        The shard directory and each event graph's edges.
    """
    from partgnn.data.detector.geometry import default_geometry
    from partgnn.data.files.writers import write_graphs
    from partgnn.data.graphs.graph_builder import GraphBuildConfig, build_event_graph
    from partgnn.data.simulation.simulate import SimulationConfig, simulate_event
    from partgnn.partition.event_split import PartitionOptions
    from partgnn.partition.shard_writer import write_shards

    rng = np.random.default_rng(seed)
    pileups = rng.integers(pileup[0], pileup[1], events, endpoint=True)
    geometry = default_geometry()
    graphs, sizes = [], []
    for event_id, value in enumerate(pileups):
        event = simulate_event(
            geometry, SimulationConfig(pileup=int(value)), event_id=event_id, seed=seed
        )
        graph, quality = build_event_graph(event, geometry, GraphBuildConfig(pt_min=pt_min))
        graphs.append((graph, quality.to_dict()))
        sizes.append(int(graph.edge_index.shape[1]))
    path = folder / "graphs.h5"
    write_graphs(path, graphs)
    shards = folder / f"metis{parts}"
    write_shards(path, shards, PartitionOptions(n_parts=parts), progress=False)
    return shards, sizes


def train_halo(folder: Path, name: str, processes: int, config: dict) -> dict:
    """``partgnn train`` in mode halo under ``torchrun`` (one thread per rank) with ``config``
    (sections of the run's config; ``run.dir`` is set here).

    Returns:
        ``steps``, ``step_s`` (mean over ranks and steps), ``waiting`` (each rank's gradient
        wait fraction), ``val_loss`` (after each epoch) and ``summary``.
    """
    run_dir = folder / f"run-{name}"
    config = {**config, "mode": "halo"}
    config["run"] = {
        "device": "cpu", "progress": False, "tensorboard": False, "timeout_s": 3600,
        "checkpoint_every": 100_000, **config.get("run", {}), "dir": str(run_dir),
    }  # fmt: skip
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run(
        torchrun(processes, "-m", "partgnn", "train", "--config", path, "--replace"),
        env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode:
        sys.exit(f"{name}: training failed\n{done.stderr[-3000:]}")
    from partgnn.metrics.run_summary import RunSummary

    summary = RunSummary.read(run_dir)
    with open(run_dir / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    per_rank = summary.workload.step_seconds_per_rank
    return {
        "steps": summary.steps,
        "step_s": sum(per_rank) / (len(per_rank) * summary.steps),
        "waiting": summary.workload.gradient_wait_fraction_per_rank,
        "val_loss": [float(row["val_loss"]) for row in rows],
        "summary": summary,
    }


def mean_sd(values: np.ndarray, signed: bool = False) -> str:
    """``values`` as one number when there is one, else ``mean +- sample standard deviation``."""
    sign = "+" if signed else ""
    if len(values) == 1:
        return f"{values[0]:{sign}.4f}"
    return f"{np.mean(values):{sign}.4f} +- {np.std(values, ddof=1):.4f}"
