"""Halo plans: what each rank holds of a partitioned event graph and what it exchanges.

A :class:`HaloPlan` is built once per (event, rank) from the global ``edge_index`` and the
node -> part assignment, and reused at every message-passing step. It implements the partition
contract of docs/DESIGN.md: a rank owns some nodes, holds every edge that touches one of them (cut
edges on both sides), keeps the remote endpoints of those edges as halo nodes grouped by owner,
and counts each global edge once (the owner of its target node counts it).

Local node order on a rank: its owned nodes (ascending global id), then its halo nodes grouped
by owner rank (ascending), ascending global id within a group. The halo group of owner ``q``
on rank ``r`` is therefore exactly the block rank ``r`` receives from ``q``, and rank ``q``
sends its owned nodes adjacent to rank ``r``'s nodes in the same ascending order.

Glossary: ``P`` number of parts (ranks of one graph-parallel group); ``N``/``E`` global nodes
and edges; ``n_owned``/``n_halo`` owned and halo nodes of one rank; ``E_local`` its edges.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from partgnn.errors import InputError


class InvalidPlanError(InputError):
    """A halo plan (or a set of plans) breaks an invariant of the partition contract."""


@dataclass(frozen=True, eq=False)
class HaloPlan:
    """One rank's share of a partitioned event graph and its exchange lists.

    Attributes:
        rank: The rank this plan is for, in ``[0, n_parts)``.
        n_parts: Number of parts ``P``.
        n_global_nodes: Nodes ``N`` of the whole event graph.
        n_global_edges: Edges ``E`` of the whole event graph.
        owned_nodes: Global ids of the owned nodes, ascending, shape ``(n_owned,)``.
        halo_nodes: Global ids of the halo nodes grouped by owner rank (ascending), ascending
            within a group, shape ``(n_halo,)``.
        halo_counts: Halo nodes owned by each rank, shape ``(P,)``; equals the rows this rank
            receives from each peer per exchange (``halo_counts[rank] == 0``).
        edge_index: Local edges in local node indices (owned first, then halo),
            shape ``(2, E_local)``.
        edge_ids: Global id of each local edge, ascending, shape ``(E_local,)``.
        edge_owned: Whether this rank counts the edge (it owns the target), shape ``(E_local,)``.
        send_index: Local indices of owned nodes to send, grouped by peer rank (ascending),
            ascending global id within a group, shape ``(sum(send_counts),)``.
        send_counts: Rows sent to each peer per exchange, shape ``(P,)``.
    """

    rank: int
    n_parts: int
    n_global_nodes: int
    n_global_edges: int
    owned_nodes: np.ndarray
    halo_nodes: np.ndarray
    halo_counts: np.ndarray
    edge_index: np.ndarray
    edge_ids: np.ndarray
    edge_owned: np.ndarray
    send_index: np.ndarray
    send_counts: np.ndarray

    @property
    def n_owned(self) -> int:
        return int(self.owned_nodes.shape[0])

    @property
    def n_halo(self) -> int:
        return int(self.halo_nodes.shape[0])

    @property
    def n_local_nodes(self) -> int:
        return self.n_owned + self.n_halo

    @property
    def n_local_edges(self) -> int:
        return int(self.edge_ids.shape[0])

    @property
    def local_nodes(self) -> np.ndarray:
        """Global id of every local node (local -> global map), shape ``(n_local_nodes,)``."""
        return np.concatenate([self.owned_nodes, self.halo_nodes])

    @property
    def recv_counts(self) -> np.ndarray:
        """Rows received from each peer per exchange, shape ``(P,)`` (the halo group sizes)."""
        return self.halo_counts

    @property
    def halo_owner(self) -> np.ndarray:
        """Owner rank of each halo node, shape ``(n_halo,)``."""
        return np.repeat(np.arange(self.n_parts), self.halo_counts)

    @property
    def neighbour_ranks(self) -> np.ndarray:
        """Ranks this rank sends to or receives from, ascending."""
        return np.flatnonzero((self.send_counts > 0) | (self.halo_counts > 0))

    @property
    def interior_edges(self) -> np.ndarray:
        """Mask of local edges with both endpoints owned (the naive sector's edges)."""
        return (self.edge_index < self.n_owned).all(axis=0)

    def send_index_to(self, peer: int) -> np.ndarray:
        """Local indices of the owned nodes sent to ``peer``, in send order."""
        start = int(self.send_counts[:peer].sum())
        return self.send_index[start : start + int(self.send_counts[peer])]

    def send_nodes(self, peer: int) -> np.ndarray:
        """Global ids of the owned nodes sent to ``peer``, in send order."""
        return self.owned_nodes[self.send_index_to(peer)]

    def halo_from(self, owner: int) -> np.ndarray:
        """Global ids of the halo nodes received from ``owner``, in slot order."""
        start = int(self.halo_counts[:owner].sum())
        return self.halo_nodes[start : start + int(self.halo_counts[owner])]

    def validate(self) -> None:
        """Checks the invariants that one plan can check on its own.

        Raises:
            InvalidPlanError: Naming the rank and the broken invariant.
        """
        where = f"halo plan of rank {self.rank}"
        p = self.n_parts

        def require(condition: bool, message: str) -> None:
            if not condition:
                raise InvalidPlanError(f"{where}: {message}")

        require(0 <= self.rank < p, f"rank not in [0, {p})")
        for name in ("halo_counts", "send_counts"):
            counts = getattr(self, name)
            require(counts.shape == (p,), f"{name} must have shape ({p},)")
            require(bool((counts >= 0).all()), f"{name} has negative entries")
            require(int(counts[self.rank]) == 0, f"{name} names the rank itself")
        require(_strictly_increasing(self.owned_nodes), "owned_nodes not ascending and unique")
        require(_in_range(self.owned_nodes, self.n_global_nodes), "owned node id out of range")
        require(_in_range(self.halo_nodes, self.n_global_nodes), "halo node id out of range")
        require(int(self.halo_counts.sum()) == self.n_halo, "halo_counts do not sum to n_halo")
        owner = self.halo_owner
        order = np.lexsort((self.halo_nodes, owner))
        require(
            bool((order == np.arange(self.n_halo)).all()),
            "halo_nodes not grouped by owner and ascending",
        )
        require(np.unique(self.halo_nodes).size == self.n_halo, "halo_nodes has duplicates")
        require(not np.isin(self.halo_nodes, self.owned_nodes).any(), "a halo node is also owned")
        require(self.edge_index.shape == (2, self.n_local_edges), "edge_index shape mismatch")
        require(self.edge_owned.shape == (self.n_local_edges,), "edge_owned shape mismatch")
        require(_strictly_increasing(self.edge_ids), "edge_ids not ascending and unique")
        require(_in_range(self.edge_ids, self.n_global_edges), "edge id out of range")
        require(_in_range(self.edge_index, self.n_local_nodes), "edge_index out of local range")
        touches_owned = (self.edge_index < self.n_owned).any(axis=0)
        require(bool(touches_owned.all()), "a local edge touches no owned node")
        require(
            bool((self.edge_owned == (self.edge_index[1] < self.n_owned)).all()),
            "edge_owned differs from 'target is owned'",
        )
        require(int(self.send_counts.sum()) == self.send_index.size, "send_counts mismatch")
        require(_in_range(self.send_index, self.n_owned), "send_index is not an owned node")
        for peer in range(p):
            require(
                _strictly_increasing(self.send_nodes(peer)),
                f"send list to rank {peer} not ascending and unique",
            )


def build_halo_plans(
    edge_index: np.ndarray, assignment: np.ndarray, n_parts: int
) -> list[HaloPlan]:
    """Builds the halo plan of every rank from a global graph and its node assignment.

    Args:
        edge_index: Global directed edges, shape ``(2, E)``.
        assignment: Part of every node, shape ``(N,)``, values in ``[0, n_parts)``.
        n_parts: Number of parts ``P`` (parts may be empty).

    Returns:
        ``P`` plans, index ``r`` for rank ``r``.

    Raises:
        InputError: If the assignment or edge_index is malformed or out of range.
    """
    edge_index, assignment = check_partition_input(edge_index, assignment, n_parts)
    n_nodes, n_edges = assignment.shape[0], edge_index.shape[1]
    src, dst = edge_index
    src_part, dst_part = assignment[src], assignment[dst]
    cut = src_part != dst_part
    # (sender rank, receiver rank, node) triples: each endpoint of a cut edge is sent by its
    # owner to the owner of the other endpoint. One int64 key per triple sorts them by sender,
    # then receiver, then node id, which is the order of both send and halo lists.
    sender = np.concatenate([src_part[cut], dst_part[cut]])
    receiver = np.concatenate([dst_part[cut], src_part[cut]])
    node = np.concatenate([src[cut], dst[cut]])
    keys = np.unique((sender * n_parts + receiver) * n_nodes + node)
    sends = np.stack([keys // n_nodes // n_parts, keys // n_nodes % n_parts, keys % n_nodes])
    plans = []
    global_to_local = np.full(n_nodes, -1, dtype=np.int64)
    for rank in range(n_parts):
        owned = np.flatnonzero(assignment == rank)
        edge_ids = np.flatnonzero((src_part == rank) | (dst_part == rank))
        # Halo of this rank = nodes other ranks send to it, grouped by sender, ascending.
        received = sends[:, sends[1] == rank]
        halo = received[2]
        global_to_local[owned] = np.arange(owned.size)
        global_to_local[halo] = owned.size + np.arange(halo.size)
        sent = sends[:, sends[0] == rank]
        local_edges = global_to_local[edge_index[:, edge_ids]]
        plans.append(
            HaloPlan(
                rank=rank,
                n_parts=n_parts,
                n_global_nodes=n_nodes,
                n_global_edges=n_edges,
                owned_nodes=owned,
                halo_nodes=halo,
                halo_counts=np.bincount(received[0], minlength=n_parts).astype(np.int64),
                edge_index=local_edges,
                edge_ids=edge_ids,
                edge_owned=dst_part[edge_ids] == rank,
                send_index=global_to_local[sent[2]],
                send_counts=np.bincount(sent[1], minlength=n_parts).astype(np.int64),
            )
        )
        global_to_local[owned] = -1
        global_to_local[halo] = -1
    return plans


def validate_plans(
    plans: Sequence[HaloPlan], edge_index: np.ndarray, assignment: np.ndarray
) -> None:
    """Checks the invariants of docs/DESIGN.md across the plans of all ranks of one event.

    Every plan must be valid on its own (:meth:`HaloPlan.validate`), and together: the owned
    nodes of all ranks partition ``V`` as ``assignment`` says; each rank holds exactly the edges
    touching its owned nodes, with the right endpoints; each global edge is owned exactly once;
    each halo node's recorded owner owns it; what rank ``q`` sends to rank ``r`` is exactly
    rank ``r``'s halo group from ``q``, in the same order.

    Raises:
        InvalidPlanError: Naming the first broken invariant.
    """
    n_parts = len(plans)
    edge_index, assignment = check_partition_input(edge_index, assignment, n_parts)
    n_nodes, n_edges = assignment.shape[0], edge_index.shape[1]
    for rank, plan in enumerate(plans):
        if plan.rank != rank or plan.n_parts != n_parts:
            raise InvalidPlanError(f"plan {rank} says rank {plan.rank} of {plan.n_parts}")
        if (plan.n_global_nodes, plan.n_global_edges) != (n_nodes, n_edges):
            raise InvalidPlanError(f"halo plan of rank {rank}: built for another graph size")
        plan.validate()
    owners = np.full(n_nodes, -1, dtype=np.int64)
    for plan in plans:
        owners[plan.owned_nodes] = plan.rank
    if sum(plan.n_owned for plan in plans) != n_nodes or not (owners == assignment).all():
        raise InvalidPlanError("owned nodes of the ranks do not partition V as assigned")
    edge_owner_count = np.zeros(n_edges, dtype=np.int64)
    for plan in plans:
        where = f"halo plan of rank {plan.rank}"
        touching = (assignment[edge_index[0]] == plan.rank) | (
            assignment[edge_index[1]] == plan.rank
        )
        if not np.array_equal(plan.edge_ids, np.flatnonzero(touching)):
            raise InvalidPlanError(f"{where}: local edges are not the edges touching owned nodes")
        if not np.array_equal(plan.local_nodes[plan.edge_index], edge_index[:, plan.edge_ids]):
            raise InvalidPlanError(f"{where}: local edge endpoints differ from the global graph")
        if not (assignment[plan.halo_nodes] == plan.halo_owner).all():
            raise InvalidPlanError(f"{where}: a halo node's recorded owner does not own it")
        np.add.at(edge_owner_count, plan.edge_ids[plan.edge_owned], 1)
        for peer in range(n_parts):
            if not np.array_equal(plans[peer].send_nodes(plan.rank), plan.halo_from(peer)):
                raise InvalidPlanError(
                    f"rank {peer} sends other nodes to rank {plan.rank} than its halo expects"
                )
    if n_edges and not (edge_owner_count == 1).all():
        edge = int(np.flatnonzero(edge_owner_count != 1)[0])
        raise InvalidPlanError(
            f"global edge {edge} is owned {int(edge_owner_count[edge])} times, expected once"
        )


def check_partition_input(
    edge_index: np.ndarray, assignment: np.ndarray, n_parts: int
) -> tuple[np.ndarray, np.ndarray]:
    """Validates and converts a global ``edge_index`` and node assignment to int64 arrays.

    Raises:
        InputError: One line naming what is wrong.
    """
    if n_parts < 1:
        raise InputError(f"parts must be >= 1 (got {n_parts})")
    edge_index = np.asarray(edge_index, dtype=np.int64)
    assignment = np.asarray(assignment, dtype=np.int64)
    if assignment.ndim != 1:
        raise InputError(f"assignment must be one-dimensional (got shape {assignment.shape})")
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise InputError(f"edge_index must have shape (2, E) (got {edge_index.shape})")
    if not _in_range(assignment, n_parts):
        raise InputError(f"assignment has parts outside [0, {n_parts})")
    if not _in_range(edge_index, assignment.shape[0]):
        raise InputError(f"edge_index refers to nodes outside [0, {assignment.shape[0]})")
    return edge_index, assignment


def _strictly_increasing(values: np.ndarray) -> bool:
    return bool((np.diff(values) > 0).all())


def _in_range(values: np.ndarray, upper: int) -> bool:
    return values.size == 0 or bool(values.min() >= 0 and values.max() < upper)
