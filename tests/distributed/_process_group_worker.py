"""One rank of the process-group tests: ``python _process_group_worker.py MODE OUT_DIR [ARG]``.

Started by torchrun, mpirun or the test itself; writes ``OUT_DIR/rank<global rank>.json`` with
what it saw, so the test checks every rank. Modes:

- ``allreduce``: all-reduce ``rank + 1`` over the whole world.
- ``groups P``: graph-parallel groups of ``P``; all-reduce in the graph and data-parallel groups.
- ``silent_peer T`` / ``exiting_peer T``: timeout ``T`` s; rank 1 never joins the collective
  (sleeps, or exits once rank 0's init is done); rank 0's all-reduce must raise, so it exits
  non-zero.
- ``missing_peer T``: run alone while the environment promises a bigger world; init must raise
  ``DistributedError`` within ``T`` s.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from partgnn.distributed.process_group import (
    DistributedError,
    destroy_distributed,
    init_distributed,
)


def _write(out_dir: Path, rank: int, record: dict) -> None:
    tmp = out_dir / f".rank{rank}.json.tmp"
    tmp.write_text(json.dumps(record))
    tmp.rename(out_dir / f"rank{rank}.json")


def _basics(ctx) -> dict:
    return {
        "launcher": ctx.launcher,
        "rank": ctx.group_rank,
        "world_size": ctx.group_size,
        "global_rank": ctx.global_rank,
        "global_world_size": ctx.global_world_size,
        "local_rank": ctx.local_rank,
        "device": str(ctx.device),
        "backend": ctx.backend,
        "default_group_size": dist.get_world_size(),
    }


def main() -> int:
    mode, out_dir = sys.argv[1], Path(sys.argv[2])
    arg = sys.argv[3] if len(sys.argv) > 3 else None

    if mode == "missing_peer":
        start = time.monotonic()
        try:
            init_distributed(device="cpu", timeout_s=float(arg))
        except DistributedError as err:
            _write(out_dir, 0, {"error": str(err), "elapsed": time.monotonic() - start})
            return 0
        return 1

    if mode == "allreduce":
        ctx = init_distributed(device="cpu", timeout_s=60)
        value = torch.tensor([float(ctx.global_rank + 1)])
        dist.all_reduce(value, group=ctx.group)
        _write(out_dir, ctx.global_rank, {**_basics(ctx), "sum": value.item()})
        destroy_distributed(ctx)
        return 0

    if mode == "groups":
        ctx = init_distributed(device="cpu", timeout_s=60, group_size=int(arg))
        in_graph = torch.tensor([float(ctx.global_rank)])
        dist.all_reduce(in_graph, group=ctx.group)
        in_data = torch.tensor([float(ctx.global_rank)])
        dist.all_reduce(in_data, group=ctx.data_parallel_group)
        record = {
            **_basics(ctx),
            "graph_sum": in_graph.item(),
            "data_sum": in_data.item(),
            "graph_group_size": dist.get_world_size(ctx.group),
            "rank_in_graph_group": dist.get_rank(ctx.group),
            "n_graph_groups": ctx.n_graph_groups,
        }
        _write(out_dir, ctx.global_rank, record)
        destroy_distributed(ctx)
        return 0

    if mode in ("silent_peer", "exiting_peer"):
        timeout_s = float(arg)
        ctx = init_distributed(device="cpu", timeout_s=timeout_s)
        # The peer goes silent or exits only once rank 0 has finished init: exiting while rank
        # 0 still connects its groups made init fail instead of the collective (a race).
        store = dist.distributed_c10d._get_default_store()
        if ctx.global_rank == 0:
            store.set("initialised", "1")
        else:
            store.wait(["initialised"])
            if mode == "exiting_peer":
                os._exit(0)  # Like a crash: no destroy, sockets closed by the kernel.
            time.sleep(timeout_s + 60)  # Alive but never joins; the test kills it.
            return 0
        start = time.monotonic()
        try:
            dist.all_reduce(torch.ones(1))
        except Exception as err:
            _write(out_dir, 0, {"error": repr(err)[:500], "elapsed": time.monotonic() - start})
            raise
        return 0  # Not reached when the timeout works: the test expects a non-zero exit.

    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    sys.exit(main())
