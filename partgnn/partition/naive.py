"""Naive sectors: each rank trains on its own sector with no exchange (the baseline).

A naive sector is a rank's owned nodes and the edges between them: every edge that crosses the
partition boundary is lost. An extended sector replicates a margin of ``hops`` neighbourhood
hops around the owned nodes (still no exchange), which gives boundary nodes some context back at
the price of duplicated compute; it still only counts the edges whose target it owns, so with
``hops >= 1`` every global edge is counted by exactly one rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from partgnn.errors import InputError
from partgnn.partition.halo_plan import HaloPlan, check_partition_input


@dataclass(frozen=True, eq=False)
class Sector:
    """A rank's independent subgraph.

    Attributes:
        rank: The rank.
        nodes: Global ids of the sector's nodes: owned nodes first (ascending), then margin
            nodes (ascending), shape ``(n_nodes,)``.
        n_owned: How many of ``nodes`` are owned.
        edge_index: Edges among ``nodes`` in local indices, shape ``(2, E_sector)``.
        edge_ids: Global ids of those edges, ascending, shape ``(E_sector,)``.
        edge_owned: Whether the sector counts the edge (its target is owned), ``(E_sector,)``.
    """

    rank: int
    nodes: np.ndarray
    n_owned: int
    edge_index: np.ndarray
    edge_ids: np.ndarray
    edge_owned: np.ndarray


def naive_sector(plan: HaloPlan) -> Sector:
    """The naive sector of a halo plan: owned nodes, interior edges, nothing else."""
    interior = plan.interior_edges
    return Sector(
        rank=plan.rank,
        nodes=plan.owned_nodes,
        n_owned=plan.n_owned,
        edge_index=plan.edge_index[:, interior],
        edge_ids=plan.edge_ids[interior],
        edge_owned=np.ones(int(interior.sum()), dtype=bool),
    )


def extended_sector(
    edge_index: np.ndarray, assignment: np.ndarray, rank: int, hops: int, n_parts: int
) -> Sector:
    """A rank's owned nodes plus ``hops`` hops of replicated neighbours, with all their edges.

    Neighbourhood hops follow edges in both directions. ``hops = 0`` gives the naive sector.

    Args:
        edge_index: Global edges, shape ``(2, E)``.
        assignment: Part of every node, shape ``(N,)``.
        rank: The sector's rank.
        hops: Width of the replicated margin, >= 0.
        n_parts: Number of parts.

    Raises:
        InputError: If ``hops`` is negative or the inputs are malformed.
    """
    if hops < 0:
        raise InputError(f"sector margin must be >= 0 hops (got {hops})")
    edge_index, assignment = check_partition_input(edge_index, assignment, n_parts)
    src, dst = edge_index
    owned = assignment == rank
    inside = owned.copy()
    for _ in range(hops):
        reached = inside.copy()
        reached[dst[inside[src]]] = True
        reached[src[inside[dst]]] = True
        if (reached == inside).all():
            break
        inside = reached
    owned_ids = np.flatnonzero(owned)
    margin_ids = np.flatnonzero(inside & ~owned)
    nodes = np.concatenate([owned_ids, margin_ids])
    edge_ids = np.flatnonzero(inside[src] & inside[dst])
    global_to_local = np.full(assignment.shape[0], -1, dtype=np.int64)
    global_to_local[nodes] = np.arange(nodes.size)
    return Sector(
        rank=rank,
        nodes=nodes,
        n_owned=int(owned_ids.size),
        edge_index=global_to_local[edge_index[:, edge_ids]],
        edge_ids=edge_ids,
        edge_owned=owned[dst[edge_ids]],
    )
