"""Partition a graphs file for P ranks with several methods, run a worker on it, load results.

:func:`run_on_shards` is the test side; :func:`worker_main` the worker side (one rank).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import torch

from partgnn.distributed.context import DistContext
from partgnn.distributed.process_group import destroy_distributed, init_distributed
from partgnn.partition.event_split import PartitionOptions
from partgnn.partition.rank_event import RankEvent
from partgnn.partition.shard_reader import ShardDirectory
from partgnn.partition.shard_writer import write_shards
from tests.distributed.launch import assert_all_succeeded, launch


def run_on_shards(
    graphs_file: Path,
    tmp_path: Path,
    world_size: int,
    module: str,
    methods: tuple[str, ...],
    cases: set[tuple],
    worker_args: tuple[str, ...] = (),
) -> list[dict]:
    """Writes ``tmp_path/<method>`` shards, runs ``module`` on ``world_size`` ranks (with
    ``worker_args`` after the usual ones), and returns what every rank saved (``--out
    tmp_path/results`` becomes ``results.rank<r>``).

    Every rank must have saved a result for exactly the keys ``cases``: a case a worker skipped
    (or one it added) fails here, not silently.
    """
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
        ["--root", str(tmp_path), "--out", str(out), "--methods", *methods, *worker_args],
        workdir=tmp_path / "logs",
    )
    assert_all_succeeded(results)
    ranks = []
    for rank in range(world_size):
        path = out.with_name(f"results.rank{rank}")
        assert path.is_file(), f"rank {rank} saved no results ({path})"
        saved = torch.load(path, weights_only=False)
        missing, extra = cases - set(saved), set(saved) - cases
        assert not missing and not extra, f"rank {rank}: missing {missing}, unexpected {extra}"
        ranks.append(saved)
    return ranks


def worker_main(compute: Callable[[RankEvent, DistContext], dict]) -> None:
    """One rank of a :func:`run_on_shards` run: ``compute`` on event 0 of every method's shards.

    Parses ``--root/--out/--methods``, reads this rank's event 0 of ``ROOT/<method>`` and saves
    ``{(method, key): value}`` for every ``key, value`` that ``compute(event, context)``
    returns to ``OUT.rank<r>``.
    """
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--methods", nargs="+", required=True)
    args = parser.parse_args()
    context = init_distributed(device="cpu", timeout_s=60)
    try:
        results = {}
        for method in args.methods:
            shards = ShardDirectory(args.root / method, world_size=context.group_size)
            with shards.open_rank(context.group_rank) as shard:
                event = shard[0]
            for key, value in compute(event, context).items():
                results[(method, *key) if isinstance(key, tuple) else (method, key)] = value
        torch.save(results, args.out.with_name(f"{args.out.name}.rank{context.group_rank}"))
    finally:
        destroy_distributed(context)
