"""One rank of the exactness check: the Interaction Network on this rank's shard.

For every partition method, dtype, checkpointing setting, transport and communication-hiding setting
(exchange in the background while the interior edges are computed, or blocking), with ``--fused``
models whose LayerNorms and activations are fused (``--gpu-kernel-paths``: compiled, as on a GPU),
with ``--reference-style`` models with BatchNorm
over the whole graph and the initial encodings concatenated, it runs a forward and
backward pass on event 0 of ``ROOT/<method>`` (shards for this world size), all-reduces the
parameter gradients and the loss over the ranks, and saves what the test compares against a
single-process full-graph run: owned-edge logits with their global edge ids, the summed
gradients, the loss, and the bytes the exchanges moved.

Run by ``tests/distributed/launch.py`` (RANK, WORLD_SIZE, MASTER_ADDR/PORT in the environment).
"""

from __future__ import annotations

import argparse
import itertools
from contextlib import nullcontext
from pathlib import Path

import torch

from partgnn.distributed.communication_counter import CommunicationCounter
from partgnn.distributed.exchange_plan import ExchangePlan
from partgnn.distributed.halo_exchange import HaloExchanger
from partgnn.distributed.process_group import destroy_distributed, init_distributed
from partgnn.models.compiled_norm_activation import variant_counts
from partgnn.models.cpu_kernels import KernelBuild
from partgnn.models.kernel_choice import gpu_kernel_paths
from partgnn.partition.shard_reader import ShardDirectory
from tests.distributed.reference import DTYPES, build_model, edge_loss, summed_over_ranks


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--methods", nargs="+", required=True)
    parser.add_argument("--transports", nargs="+", default=["all_to_all", "p2p"])
    parser.add_argument("--fused", action="store_true", help="models with model.fused")
    parser.add_argument(
        "--gpu-kernel-paths", action="store_true",
        help="the fused kernels' GPU paths (compiled LayerNorm + activation) on the CPU",
    )  # fmt: skip
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES))
    parser.add_argument(
        "--reference-style", action="store_true",
        help="models with the reference pipeline's BatchNorm and concatenation",
    )  # fmt: skip
    args = parser.parse_args()
    context = init_distributed(device="cpu", timeout_s=60)
    with gpu_kernel_paths() if args.gpu_kernel_paths else nullcontext():
        results = _results(args, context)
    torch.save(results, args.out.with_name(f"{args.out.name}.rank{context.group_rank}"))
    destroy_distributed(context)


def _results(args: argparse.Namespace, context) -> dict:
    results = {}
    for method in args.methods:
        shards = ShardDirectory(args.root / method, world_size=context.group_size)
        with shards.open_rank(context.group_rank) as shard:
            event = shard[0]
        plan = ExchangePlan.from_halo_plan(event.plan)
        graph = event.graph
        owned = torch.from_numpy(event.plan.edge_owned)
        edge_ids = torch.from_numpy(event.plan.edge_ids)[owned]
        for dtype_name in args.dtypes:
            dtype = DTYPES[dtype_name]
            for checkpoint in (False, True):
                for transport, hide in itertools.product(args.transports, (False, True)):
                    model = build_model(
                        graph, dtype, checkpoint=checkpoint, fused=args.fused,
                        reference_style=args.reference_style,
                    )  # fmt: skip
                    counter = CommunicationCounter()
                    exchange = HaloExchanger(
                        plan, context, transport=transport, counter=counter, hide_communication=hide
                    )
                    logits = model(
                        graph.x.to(dtype),
                        graph.edge_index,
                        graph.edge_attr.to(dtype),
                        exchange=exchange,
                    )
                    loss = edge_loss(logits[owned], graph.y[owned].to(dtype), event.n_global_edges)
                    loss.backward()
                    grads, total_loss = summed_over_ranks(model, loss, context.group)
                    results[(method, dtype_name, checkpoint, transport, hide)] = {
                        "edge_ids": edge_ids,
                        "logits": logits.detach()[owned],
                        "grads": grads,
                        "loss": total_loss,
                        "counter": counter.as_dict(),
                        "rows_sent": plan.rows_sent,
                        "rows_received": plan.n_halo,
                        "fused_kernel_loaded": KernelBuild.seconds is not None,
                        "compiled_variants": variant_counts(),
                    }
    return results


if __name__ == "__main__":
    main()
