"""Proving on the launched processes that partitioned training is exact (``partgnn selfcheck``;
``partgnn.selfcheck`` in a script of one's own). It uses every stage and the Python API as a script
would: the simulator, the graph builder, the partitioner, the exchange and the model.

Every rank builds the same small simulated event graph, partitions it with METIS for the group
size, runs a 4-step Interaction Network forward and backward through the halo exchange on its
partition (float64), and gathers logits and summed gradients; each rank also runs the whole
graph alone and compares. A user runs it under the launcher of their cluster to check the set-up
before a long training::

    torchrun --nproc-per-node 4 -m partgnn selfcheck
    mpirun -n 4 partgnn selfcheck
    srun -n 4 partgnn selfcheck
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch_geometric.data import Data

from partgnn.api import local_graph, make_exchange, partition_event
from partgnn.data.detector.geometry import default_geometry
from partgnn.data.graphs.graph_builder import GraphBuildConfig, build_event_graph
from partgnn.data.simulation.simulate import SimulationConfig, simulate_event
from partgnn.distributed.context import DistContext
from partgnn.distributed.halo_exchange import HaloExchanger
from partgnn.models.interaction_network import InteractionNetwork

#: Largest relative error accepted in float64.
TOLERANCE = 1e-10


@dataclass(frozen=True)
class SelfcheckResult:
    """What :func:`selfcheck` found on one graph group.

    Attributes:
        ranks: The group's ranks.
        method: The partition method.
        logits_error: Largest relative error of the edge logits, against the whole graph in one
            process (float64).
        gradients_error: The same of the summed parameter gradients.
        tolerance: The largest error that passes.
    """

    ranks: int
    method: str
    logits_error: float
    gradients_error: float
    tolerance: float = TOLERANCE

    @property
    def ok(self) -> bool:
        """Whether both errors are within the tolerance."""
        return max(self.logits_error, self.gradients_error) <= self.tolerance


def selfcheck(
    context: DistContext, *, transport: str = "auto", method: str = "metis"
) -> SelfcheckResult:
    """Runs the check on ``context``'s group (every rank of it calls this, a collective); returns
    the relative errors of the partitioned logits and gradients (float64)."""
    geometry = default_geometry()
    event = simulate_event(geometry, SimulationConfig(pileup=3), event_id=0, seed=11)
    graph, _ = build_event_graph(event, geometry, GraphBuildConfig(pt_min=0.0))
    device = context.device
    plan = partition_event(graph, context.group_size, method, seed=0)[context.group_rank]
    local = local_graph(graph, plan)
    edges = local.edge_ids
    owned = local.edge_owned.to(device)
    exchanger = make_exchange(plan, context, transport=transport)
    logits, gradients = _forward_backward(
        local, exchanger, owned, graph.edge_index.shape[1], device
    )
    dist.all_reduce(gradients, group=context.group)
    full_logits = torch.zeros(graph.edge_index.shape[1], dtype=torch.float64, device=device)
    full_logits[edges.to(device)[owned]] = logits[owned]
    dist.all_reduce(full_logits, group=context.group)
    everything = torch.ones(graph.edge_index.shape[1], dtype=torch.bool, device=device)
    reference_logits, reference_gradients = _forward_backward(
        graph, None, everything, graph.edge_index.shape[1], device
    )
    return SelfcheckResult(
        ranks=context.group_size,
        method=method,
        logits_error=relative_error(full_logits, reference_logits),
        gradients_error=relative_error(gradients, reference_gradients),
    )


def _forward_backward(
    graph: Data,
    exchange: HaloExchanger | None,
    counted: torch.Tensor,
    n_global_edges: int,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Edge logits ``(E_local,)`` and the flattened parameter gradient of a fresh model."""
    torch.manual_seed(0)
    model = InteractionNetwork(
        node_features=graph.x.shape[1], edge_features=graph.edge_attr.shape[1], hidden=16, steps=4
    ).to(device=device, dtype=torch.float64)
    logits = model(
        graph.x.to(device, torch.float64),
        graph.edge_index.to(device),
        graph.edge_attr.to(device, torch.float64),
        exchange=exchange,
    )
    y = graph.y.to(device, torch.float64)
    loss = F.binary_cross_entropy_with_logits(logits[counted], y[counted], reduction="sum")
    (loss / max(n_global_edges, 1)).backward()
    return logits.detach(), torch.cat([p.grad.flatten() for p in model.parameters()])


def relative_error(value: torch.Tensor, reference: torch.Tensor) -> float:
    """``||value - reference|| / ||reference||``, computed in float64 (0 when both are 0)."""
    value, reference = value.double(), reference.double()
    scale = reference.norm().item()
    difference = (value - reference).norm().item()
    return difference / scale if scale > 0 else difference
