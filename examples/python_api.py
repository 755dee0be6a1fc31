"""The Python API on one event: partition it, build the exchange, run a model on each rank.

Run under a launcher; every rank builds the same simulated event, takes its part, runs the
Interaction Network forward and backward through the halo exchange, and checks its logits and
the summed gradient against the whole graph computed on the same rank (float64)::

    torchrun --standalone --nproc-per-node 3 examples/python_api.py
    mpirun -n 3 python examples/python_api.py

``DEVICE`` chooses the device (default ``auto``: one GPU per rank where there are GPUs).
"""

from __future__ import annotations

import os
import sys

import torch

import partgnn
from partgnn.data.detector.geometry import default_geometry
from partgnn.data.graphs.graph_builder import GraphBuildConfig, build_event_graph
from partgnn.data.simulation.simulate import SimulationConfig, simulate_event


def main() -> int:
    context = partgnn.init_distributed(device=os.environ.get("DEVICE", "auto"))
    try:
        geometry = default_geometry()
        event = simulate_event(geometry, SimulationConfig(pileup=10), event_id=0, seed=3)
        graph, _ = build_event_graph(event, geometry, GraphBuildConfig(pt_min=1.0))
        graph.x, graph.edge_attr = graph.x.double(), graph.edge_attr.double()

        plans = partgnn.partition_event(graph, context.group_size, method="phi")
        part = partgnn.local_graph(graph, plans[context.group_rank]).to(context.device)
        exchange = partgnn.make_exchange(plans[context.group_rank], context)

        def model_and_loss(x, edge_index, edge_attr, data, exchange):
            torch.manual_seed(0)  # the same initial weights on every rank
            model = partgnn.InteractionNetwork(
                node_features=graph.x.shape[1], edge_features=graph.edge_attr.shape[1],
                hidden=16, steps=3,
            ).to(context.device, torch.float64)  # fmt: skip
            logits = model(x, edge_index, edge_attr, exchange=exchange)
            loss = partgnn.owned_edge_loss(logits, data, pos_weight=3.0)
            loss.backward()
            return model, logits

        model, logits = model_and_loss(part.x, part.edge_index, part.edge_attr, part, exchange)
        partgnn.sum_gradients(model, context)  # the whole-graph gradient on every rank

        whole = partgnn.local_graph(graph, partgnn.partition_event(graph, 1)[0]).to(context.device)
        reference, reference_logits = model_and_loss(
            whole.x, whole.edge_index, whole.edge_attr, whole, None
        )
        owned = part.edge_owned
        logit_error = (logits[owned] - reference_logits[part.edge_ids[owned]]).abs().max().item()
        grad_error = max(
            ((p.grad - r.grad).norm() / r.grad.norm()).item()
            for p, r in zip(model.parameters(), reference.parameters(), strict=True)
        )
        # One write per line, so that the lines of the ranks sharing a terminal do not interleave.
        sys.stdout.write(
            f"rank {context.group_rank}/{context.group_size}: "
            f"{plans[context.group_rank].n_owned} owned + "
            f"{plans[context.group_rank].n_halo} halo nodes, {int(owned.sum())} counted edges; "
            f"max logit error {logit_error:.1e}, gradient error {grad_error:.1e}\n"
        )
        sys.stdout.flush()
        return 0 if logit_error < 1e-10 and grad_error < 1e-10 else 1
    finally:
        partgnn.destroy_distributed(context)


if __name__ == "__main__":
    sys.exit(main())
