"""Partition a graphs file for P ranks with several methods, run a worker on it, load results."""

from __future__ import annotations

from pathlib import Path

import torch

from partgnn.partition.shard_writer import PartitionOptions, write_shards
from tests.distributed.launch import assert_all_succeeded, launch


def run_on_shards(
    graphs_file: Path, tmp_path: Path, world_size: int, module: str, methods: tuple[str, ...]
) -> list[dict]:
    """Writes ``tmp_path/<method>`` shards, runs ``module`` on ``world_size`` ranks, and returns
    what every rank saved (``--out tmp_path/results`` becomes ``results.rank<r>``)."""
    for method in methods:
        write_shards(
            graphs_file,
            tmp_path / method,
            PartitionOptions(n_parts=world_size, method=method),
            progress=False,
        )
    out = tmp_path / "results"
    results = launch(
        world_size,
        module,
        ["--root", str(tmp_path), "--out", str(out), "--methods", *methods],
        workdir=tmp_path / "logs",
    )
    assert_all_succeeded(results)
    return [
        torch.load(out.with_name(f"results.rank{r}"), weights_only=False) for r in range(world_size)
    ]
