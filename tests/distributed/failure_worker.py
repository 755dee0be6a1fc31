"""One rank of the failure-agreement check: exceptions raised on one rank inside PartitionedLayer.

A 12-node graph split over 3 ranks, rank 2 owning no node. Scenarios, in order, each caught and
recorded (exception type, first line, seconds from the scenario's start):

- ``empty-rank``: FeaStConv fails on the rank with no nodes (PyG cannot reshape 0 rows).
- ``bad-rows``: rank 1 passes one row too few.
- ``recovered``: GraphConv on every rank, after the two failures: the group is still usable.

Then ``exit``: a layer raises on rank 0 and nothing catches it, so every rank exits non-zero.
The record is written to ``--out`` + ``.rank<r>`` (JSON) before that. ``--control-group``: the
ranks agree over a separate gloo group with CPU tensors, as on NCCL jobs.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from torch_geometric.nn import FeaStConv, GraphConv, MessagePassing

from partgnn.distributed.exchange_plan import ExchangePlan
from partgnn.distributed.halo_exchange import HaloExchanger
from partgnn.distributed.process_group import destroy_distributed, init_distributed
from partgnn.partition.halo_plan import build_halo_plans

N_NODES = 12


class FailsOnRankZero(MessagePassing):
    """A layer that raises on rank 0 only (its rank is set before the forward)."""

    rank = -1

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        if self.rank == 0:
            raise RuntimeError("boom on rank 0")
        return self.propagate(edge_index, x=x)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--control-group",
        action="store_true",
        help="agree over gloo's control group, as NCCL jobs do",
    )
    args = parser.parse_args()
    context = init_distributed(device="cpu", timeout_s=300, control_group=args.control_group)
    assert (context.control_group is not None) == args.control_group
    from partgnn.models.partitioned_layer import PartitionedLayer

    generator = np.random.default_rng(0)
    edge_index = generator.integers(0, N_NODES, (2, 40))
    assignment = np.arange(N_NODES) % 2  # ranks 0 and 1; rank 2 owns no node
    plan = build_halo_plans(edge_index, assignment, context.group_size)[context.group_rank]
    exchange = HaloExchanger(ExchangePlan.from_halo_plan(plan), context)
    local_edges = torch.from_numpy(plan.edge_index)
    torch.manual_seed(0)
    x_owned = torch.randn(plan.n_owned, 4)

    def scenario(layer: MessagePassing, x: torch.Tensor) -> dict:
        start = time.monotonic()
        try:
            out = PartitionedLayer(layer)(x, local_edges, exchange)
            outcome = {"error": None, "rows": out.shape[0]}
        except Exception as err:  # recorded for the test
            outcome = {"error": type(err).__name__, "message": str(err).splitlines()[0]}
        outcome["seconds"] = time.monotonic() - start
        return outcome

    record = {
        "empty-rank": scenario(FeaStConv(4, 8, heads=2), x_owned),
        "bad-rows": scenario(GraphConv(4, 8), x_owned[:-1] if context.group_rank == 1 else x_owned),
        "recovered": scenario(GraphConv(4, 8), x_owned),
    }
    args.out.with_name(f"{args.out.name}.rank{context.group_rank}").write_text(json.dumps(record))
    try:
        failing = FailsOnRankZero()
        failing.rank = context.group_rank
        PartitionedLayer(failing, assume_exact=True)(x_owned, local_edges, exchange)
    finally:
        destroy_distributed(context)


if __name__ == "__main__":
    main()
