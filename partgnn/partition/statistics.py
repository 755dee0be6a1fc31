"""Quality statistics of a partition: cut, halo sizes, load balance, traffic per exchange.

These are what a user weighs when choosing a partitioner and P: the fraction of (true) edges
that naive sectorisation loses, how much each rank replicates (halo), how even the work is, and
how many bytes every message-passing step must move.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from partgnn.partition.halo_plan import HaloPlan
from partgnn.partition.work import imbalance as _imbalance
from partgnn.partition.work import rank_work

#: Hidden size used when statistics quote bytes per exchange without being told one.
DEFAULT_HIDDEN = 64


@dataclass(frozen=True)
class PartitionStatistics:
    """Statistics of one partitioned event graph.

    Per-rank arrays have shape ``(P,)``. Imbalance is max / mean over all ``P`` ranks (1.0 is
    perfect balance).

    Attributes:
        n_parts: Number of parts ``P``.
        n_nodes: Global nodes ``N``.
        n_edges: Global edges ``E``.
        n_cut_edges: Edges whose endpoints lie in different parts.
        n_true_edges: Edges with ``y == 1`` (0 if truth is unknown).
        n_cut_true_edges: True edges among the cut ones: track segments that naive
            sectorisation loses.
        owned_nodes: Owned nodes per rank.
        halo_nodes: Halo nodes per rank.
        local_edges: Edges each rank computes (cut edges on both sides).
        neighbours: Peers each rank exchanges with.
        send_rows: Rows each rank sends per exchange.
    """

    n_parts: int
    n_nodes: int
    n_edges: int
    n_cut_edges: int
    n_true_edges: int
    n_cut_true_edges: int
    owned_nodes: np.ndarray
    halo_nodes: np.ndarray
    local_edges: np.ndarray
    neighbours: np.ndarray
    send_rows: np.ndarray

    @property
    def edge_cut_fraction(self) -> float:
        return self.n_cut_edges / self.n_edges if self.n_edges else 0.0

    @property
    def true_edge_cut_fraction(self) -> float:
        """Fraction of true edges that cross the cut (NaN without truth)."""
        return self.n_cut_true_edges / self.n_true_edges if self.n_true_edges else float("nan")

    @property
    def halo_ratio(self) -> np.ndarray:
        """Halo nodes / owned nodes per rank (0 for an empty rank)."""
        return np.divide(
            self.halo_nodes,
            self.owned_nodes,
            out=np.zeros(self.n_parts),
            where=self.owned_nodes > 0,
        )

    @property
    def node_imbalance(self) -> float:
        return _imbalance(self.owned_nodes)

    @property
    def edge_imbalance(self) -> float:
        return _imbalance(self.local_edges)

    @property
    def work(self) -> np.ndarray:
        """Work per rank in edge units (local edges, owned and halo nodes), shape ``(P,)``."""
        return rank_work(self.local_edges, self.owned_nodes, self.halo_nodes)

    @property
    def work_imbalance(self) -> float:
        return _imbalance(self.work)

    def bytes_per_exchange(self, hidden: int = DEFAULT_HIDDEN, itemsize: int = 4) -> np.ndarray:
        """Bytes each rank sends in one halo exchange of ``hidden`` features, shape ``(P,)``.

        The backward pass of the exchange moves the same number of bytes the other way.
        """
        return self.send_rows * hidden * itemsize

    def to_dict(self, hidden: int = DEFAULT_HIDDEN) -> dict[str, object]:
        """JSON-ready summary (per-rank arrays as lists)."""
        return {
            "n_parts": self.n_parts,
            "n_nodes": self.n_nodes,
            "n_edges": self.n_edges,
            "edge_cut_fraction": self.edge_cut_fraction,
            "true_edge_cut_fraction": self.true_edge_cut_fraction,
            "node_imbalance": self.node_imbalance,
            "edge_imbalance": self.edge_imbalance,
            "work_imbalance": self.work_imbalance,
            "owned_nodes": self.owned_nodes.tolist(),
            "halo_nodes": self.halo_nodes.tolist(),
            "halo_ratio": self.halo_ratio.tolist(),
            "local_edges": self.local_edges.tolist(),
            "neighbours": self.neighbours.tolist(),
            "send_rows": self.send_rows.tolist(),
            "hidden": hidden,
            "bytes_per_exchange": self.bytes_per_exchange(hidden).tolist(),
        }


def partition_statistics(
    plans: Sequence[HaloPlan], edge_index: np.ndarray, y: np.ndarray | None = None
) -> PartitionStatistics:
    """Computes the statistics of one event's partition from its halo plans.

    Args:
        plans: The plans of all ranks (from :func:`~partgnn.partition.halo_plan.build_halo_plans`).
        edge_index: Global edges, shape ``(2, E)``.
        y: Edge truth, shape ``(E,)`` (optional).
    """
    n_nodes = plans[0].n_global_nodes
    assignment = np.empty(n_nodes, dtype=np.int64)
    for plan in plans:
        assignment[plan.owned_nodes] = plan.rank
    edge_index = np.asarray(edge_index)
    cut = assignment[edge_index[0]] != assignment[edge_index[1]]
    true = np.zeros(cut.shape, dtype=bool) if y is None else np.asarray(y) > 0.5
    return PartitionStatistics(
        n_parts=len(plans),
        n_nodes=n_nodes,
        n_edges=int(edge_index.shape[1]),
        n_cut_edges=int(cut.sum()),
        n_true_edges=int(true.sum()),
        n_cut_true_edges=int((cut & true).sum()),
        owned_nodes=np.array([plan.n_owned for plan in plans]),
        halo_nodes=np.array([plan.n_halo for plan in plans]),
        local_edges=np.array([plan.n_local_edges for plan in plans]),
        neighbours=np.array([plan.neighbour_ranks.size for plan in plans]),
        send_rows=np.array([int(plan.send_counts.sum()) for plan in plans]),
    )


def summarize(statistics: Sequence[PartitionStatistics], hidden: int = DEFAULT_HIDDEN) -> dict:
    """Means over events of the scalar statistics, for ``meta.json`` and ``partgnn inspect``."""
    rows = [
        {
            "edge_cut_fraction": s.edge_cut_fraction,
            "true_edge_cut_fraction": s.true_edge_cut_fraction,
            "halo_ratio_mean": float(s.halo_ratio.mean()),
            "halo_ratio_max": float(s.halo_ratio.max()),
            "node_imbalance": s.node_imbalance,
            "edge_imbalance": s.edge_imbalance,
            "work_imbalance": s.work_imbalance,
            "neighbours_max": int(s.neighbours.max()),
            "bytes_per_exchange_total": int(s.bytes_per_exchange(hidden).sum()),
            "bytes_per_exchange_max_rank": int(s.bytes_per_exchange(hidden).max()),
        }
        for s in statistics
    ]
    if not rows:
        return {"events": 0, "hidden": hidden}
    summary = {key: _mean_of_defined([row[key] for row in rows]) for key in rows[0]}
    return {"events": len(rows), "hidden": hidden, **summary}


def _mean_of_defined(values: list[float]) -> float:
    """The mean of the values that are not NaN (NaN when none is: e.g. graphs without edges)."""
    defined = [v for v in values if not np.isnan(v)]
    return float(np.mean(defined)) if defined else float("nan")
