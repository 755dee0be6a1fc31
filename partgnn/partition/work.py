"""The work of each rank under a partition: the edges, owned nodes and halo nodes it computes.

Under the halo contract (docs/DESIGN.md) rank ``r`` computes every edge with an owned endpoint (cut
edges on both sides), updates its owned nodes, and projects the latents of its owned and halo
nodes for the edge network. A rank's work, in units of one local edge, is ``1`` per local edge,
:data:`OWNED_NODE_COST` per owned node and :data:`HALO_NODE_COST` per halo node.

The costs are measured, not counted. Counting multiply-adds of one message-passing step of the
Interaction Network (2-layer MLPs of width ``H``) gives an owned node 3 edges (node MLP ``4 H^2``
and two projections ``2 H^2``, against ``2 H^2`` per edge), but a step's time is not its
multiply-adds: per edge it also gathers two node rows, scatters one and runs element-wise work,
all memory-bound at ``H <= 64``. Timing every rank's step on its own
(``tools/studies/bench_work_model.py``, pile-up-200 events, METIS P = 2-8, H = 32 and 64, CPU, one
thread) and fitting ``seconds = a * edges + b * owned + c * halo + d`` gave an owned node 0.58-0.82
edges; with the counted cost of 3, partitions balanced by work left ranks idle longer than ones
balanced by edges at H = 32 (3.1-5.3 % of a step against 0.5-2.8 %), with 1 less long at P = 4 and 8
(docs/history/partitioning.md, "Does a rank's step time follow the work model?"). A halo
node's cost came out between -3.4 and 4.5 edges (halo nodes are few, so it is poorly
determined); it is kept at 1 (its two projections and its row of the exchange). GPUs were not
measured.
"""

from __future__ import annotations

import numpy as np

#: Work of one owned node, in units of the work of one local edge (measured: see the module
#: docstring).
OWNED_NODE_COST = 1
#: Work of one halo node, in units of the work of one local edge.
HALO_NODE_COST = 1


def rank_work(
    local_edges: np.ndarray, owned_nodes: np.ndarray, halo_nodes: np.ndarray
) -> np.ndarray:
    """Work of each rank, in edge units, from its counts (each shape ``(P,)``).

    Returns:
        ``local_edges + OWNED_NODE_COST * owned_nodes + HALO_NODE_COST * halo_nodes``, float64,
        shape ``(P,)``.
    """
    return (
        np.asarray(local_edges, dtype=np.float64)
        + OWNED_NODE_COST * np.asarray(owned_nodes, dtype=np.float64)
        + HALO_NODE_COST * np.asarray(halo_nodes, dtype=np.float64)
    )


def partition_counts(
    edge_index: np.ndarray, part: np.ndarray, n_parts: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Local edges, owned nodes and halo nodes of each rank, without building halo plans.

    Args:
        edge_index: Global directed edges, shape ``(2, E)``, int64 in ``[0, N)`` (unchecked).
        part: Part of every node, shape ``(N,)``, int64 in ``[0, n_parts)`` (unchecked).
        n_parts: Number of parts ``P``.

    Returns:
        ``(local_edges, owned_nodes, halo_nodes)``, each int64 of shape ``(P,)``; local edges
        count cut edges on both sides.
    """
    n_nodes = part.shape[0]
    src, dst = edge_index[0], edge_index[1]
    src_part, dst_part = part[src], part[dst]
    cut = src_part != dst_part
    local_edges = np.bincount(src_part, minlength=n_parts) + np.bincount(
        dst_part[cut], minlength=n_parts
    )
    owned = np.bincount(part, minlength=n_parts)
    # A halo node of rank r: a node of another rank at the far end of one of r's cut edges.
    halo_keys = np.unique(
        np.concatenate([dst_part[cut] * n_nodes + src[cut], src_part[cut] * n_nodes + dst[cut]])
    )
    halo = np.bincount(halo_keys // max(n_nodes, 1), minlength=n_parts)
    return local_edges, owned, halo


def partition_work(edge_index: np.ndarray, part: np.ndarray, n_parts: int) -> np.ndarray:
    """Work of each rank of a partition in edge units, float64, shape ``(P,)`` (arguments as
    :func:`partition_counts`; see :func:`rank_work`)."""
    return rank_work(*partition_counts(edge_index, part, n_parts))


def imbalance(values: np.ndarray) -> float:
    """Max over mean of per-rank values (1.0 is perfect balance; 1.0 when the mean is 0)."""
    mean = float(np.mean(values))
    return float(np.max(values)) / mean if mean > 0 else 1.0
