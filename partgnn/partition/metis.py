"""METIS k-way partitioning of event graphs, balanced by the work of each rank, not by nodes.

:func:`metis_partition` symmetrises the directed ``edge_index`` into the simple undirected graph
METIS expects (CSR arrays from :func:`undirected_csr`), weights every node and calls
``pymetis.part_graph`` with a fixed seed, so a partition is reproducible.

The default weighting, ``"work"``, balances what a rank computes (:mod:`partgnn.partition.work`:
its local edges, owned nodes and halo nodes, in edge units). A node weighs
``2 * OWNED_NODE_COST + degree``: summed over a part that is twice its owned-node work plus twice
its interior edges plus its cut edges once, which is twice its work but for the cut edges' other
half and the halo, which depend on the boundary METIS draws. Those are corrected afterwards: the
parts' measured work sets METIS's target part weights (``tpwgts``) for
:data:`WORK_REFINEMENTS` more partitions, and the one with the least work imbalance (max / mean)
wins. METIS's balance tolerance is tightened from 3 % to :data:`WORK_UFACTOR` (1 %), which on
pile-up-200 graphs also cut fewer edges than ``1 + degree`` weights (tools/bench_partition.py,
docs/BENCHMARKS.md).

``"degree"`` (``1 + degree``) balances edges only: degrees in a pile-up-200 graph range from 0 to
~100 (median 15, mean 22), so unit weights leave the edges ~1.3x imbalanced at 8 parts and
``1 + degree`` ~1.03x, but the work (edges plus owned and halo nodes) ~1.04x at 8 parts on a
pT > 1 GeV graph, which ``"work"`` brings to ~1.01x. ``"unit"`` balances node counts only.
"""

from __future__ import annotations

from collections.abc import Callable
from numbers import Integral
from typing import Literal

import numpy as np
import pymetis

from partgnn.errors import InputError
from partgnn.partition.work import OWNED_NODE_COST, imbalance, partition_work

#: Node weightings :func:`metis_partition` accepts: ``"work"`` (edges, owned and halo nodes),
#: ``"degree"`` (``1 + degree``) or ``"unit"``.
VERTEX_WEIGHTINGS: tuple[str, ...] = ("work", "degree", "unit")
#: Partitions after the first one that ``"work"`` tries, with targets from measured work.
WORK_REFINEMENTS = 2
#: METIS load imbalance tolerance for ``"work"``, in 1/1000 (METIS's default is 30).
WORK_UFACTOR = 10

# METIS is built with 32-bit indices (pymetis copies and warns on int64 arrays).
_IDX = np.int32
_IDX_MAX = np.iinfo(_IDX).max


def metis_partition(
    edge_index: object,
    num_nodes: int,
    n_parts: int,
    *,
    seed: int = 0,
    vertex_weights: Literal["work", "degree", "unit"] = "work",
) -> np.ndarray:
    """Partitions a graph into ``n_parts`` parts with METIS k-way, deterministically for a seed.

    Direction, duplicate edges and self-loops do not matter: METIS sees the simple undirected
    graph. Cases METIS is not needed for, or gets wrong, are decided here:

    - ``n_parts == 1``: every node in part 0 (no METIS call).
    - ``num_nodes <= n_parts``: node ``i`` in part ``i`` (parts ``num_nodes..n_parts-1`` stay
      empty). METIS cannot bisect so few vertices and prints errors, or lumps them together.
    - no edges (besides self-loops): contiguous blocks of node ids of equal size; any split cuts
      nothing, so only balance matters.
    - otherwise METIS; if it leaves a part empty (it does on graphs of a few dozen nodes), the
      lowest-degree node of the heaviest part moves there, so every part has a node whenever
      ``num_nodes >= n_parts``.

    Args:
        edge_index: Directed edges, shape ``(2, E)``, integers in ``[0, num_nodes)``; a numpy
            array or a torch tensor.
        num_nodes: Number of nodes ``N``; nodes without edges are partitioned too.
        n_parts: Number of parts ``P >= 1``.
        seed: METIS random seed, in ``[0, 2**31)``; the same seed gives the same partition.
        vertex_weights: ``"work"`` balances each rank's local edges, owned and halo nodes
            (see the module docstring); ``"degree"`` weights node ``v`` by ``1 + deg(v)``
            (undirected, simple degree) to balance edges; ``"unit"`` balances node counts.

    Returns:
        Part of every node, shape ``(N,)``, int64 in ``[0, n_parts)``.

    Raises:
        InputError: If ``n_parts``, ``seed``, ``vertex_weights`` or ``edge_index`` are invalid,
            or the graph is too large for METIS's 32-bit indices.
    """
    _check_n_parts(n_parts)
    check_seed(seed)
    if vertex_weights not in VERTEX_WEIGHTINGS:
        raise InputError(
            f"unknown vertex weighting {vertex_weights!r} (choose {', '.join(VERTEX_WEIGHTINGS)})"
        )
    edges = check_edge_index(edge_index, num_nodes)
    n_parts = int(n_parts)
    if n_parts == 1:
        return np.zeros(num_nodes, dtype=np.int64)
    if num_nodes <= n_parts:
        return np.arange(num_nodes, dtype=np.int64)
    xadj, adjncy = undirected_csr(edges, num_nodes)
    if adjncy.size == 0:
        return np.arange(num_nodes, dtype=np.int64) * n_parts // num_nodes
    degree = np.diff(xadj).astype(np.int64)
    if vertex_weights == "work":
        weights = 2 * OWNED_NODE_COST + degree
    elif vertex_weights == "degree":
        weights = 1 + degree
    else:
        weights = np.ones(num_nodes, dtype=np.int64)
    if int(weights.sum()) > _IDX_MAX:
        raise InputError(f"graph too large for METIS (total vertex weight {int(weights.sum())})")

    def partition(targets: np.ndarray | None = None, ufactor: int | None = None) -> np.ndarray:
        result = _part_graph(
            n_parts,
            xadj,
            adjncy,
            vweights=weights.astype(_IDX),
            tpwgts=None if targets is None else targets.tolist(),
            # k-way: METIS's own algorithm for P > 8, and at P <= 8 it cut fewer edges than
            # recursive bisection on pile-up-200 graphs (recursive is pymetis's default there).
            recursive=False,
            options=pymetis.Options(
                seed=int(seed), **({} if ufactor is None else {"ufactor": ufactor})
            ),
        )
        part = np.asarray(result.vertex_part, dtype=np.int64)
        return _fill_empty_parts(part, n_parts, weights, degree)

    if vertex_weights != "work":
        return partition()
    return _balance_work(partition, edges, n_parts)


def _balance_work(
    partition: Callable[[np.ndarray | None, int], np.ndarray], edges: np.ndarray, n_parts: int
) -> np.ndarray:
    """The least work-imbalanced of ``1 + WORK_REFINEMENTS`` METIS partitions, each with target
    part weights shrunk where the previous one's work was above the mean."""
    targets = None  # equal parts
    best, best_imbalance = None, np.inf
    for _ in range(1 + WORK_REFINEMENTS):
        part = partition(targets, WORK_UFACTOR)
        work = partition_work(edges, part, n_parts)
        work_imbalance = imbalance(work)
        if work_imbalance < best_imbalance:
            best, best_imbalance = part, work_imbalance
        if not np.all(work > 0):
            break
        # Square root: a part's work per unit of weight changes with its boundary, so damp.
        previous = np.full(n_parts, 1.0 / n_parts) if targets is None else targets
        targets = previous * np.sqrt(work.mean() / work)
        targets = targets / targets.sum()
    return best


def undirected_csr(edge_index: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR arrays of the simple undirected graph underlying a directed edge list.

    Both directions of every edge are stored, each once; self-loops are dropped; neighbours of
    a node are sorted.

    Args:
        edge_index: Directed edges, shape ``(2, E)``, int64 in ``[0, num_nodes)`` (unchecked:
            see :func:`check_edge_index`).
        num_nodes: Number of nodes ``N``.

    Returns:
        ``(xadj, adjncy)``: int32 arrays of shape ``(N + 1,)`` and ``(2 * E_undirected,)``; the
        neighbours of node ``i`` are ``adjncy[xadj[i]:xadj[i + 1]]``.

    Raises:
        InputError: If the graph has more than ``2**31 - 1`` nodes or adjacency entries.
    """
    if num_nodes > _IDX_MAX:
        raise InputError(f"graph too large for METIS ({num_nodes} nodes)")
    src, dst = edge_index[0], edge_index[1]
    keep = src != dst
    src, dst = src[keep], dst[keep]
    # One int64 key per directed pair, sorted: duplicates become neighbours and the order is the
    # CSR order. N < 2**31, so N * N fits in int64. On a pile-up-200 graph the stable sort
    # (timsort exploits the sorted runs of edge lists) takes 0.04 s, np.unique 2.1 s.
    key = np.concatenate([src * num_nodes + dst, dst * num_nodes + src])
    key = np.sort(key, kind="stable")
    if key.size:
        key = key[np.concatenate(([True], key[1:] != key[:-1]))]
    if key.size > _IDX_MAX:
        raise InputError(f"graph too large for METIS ({key.size} adjacency entries)")
    xadj = np.zeros(num_nodes + 1, dtype=_IDX)
    np.cumsum(np.bincount(key // num_nodes, minlength=num_nodes), out=xadj[1:])
    adjncy = (key % num_nodes).astype(_IDX)
    return xadj, adjncy


def check_edge_index(edge_index: object, num_nodes: int) -> np.ndarray:
    """Validates an ``edge_index`` and returns it as an int64 numpy array.

    Args:
        edge_index: Directed edges, shape ``(2, E)``; a numpy array or a torch tensor.
        num_nodes: Number of nodes ``N``.

    Returns:
        The edges, shape ``(2, E)``, int64.

    Raises:
        InputError: If ``num_nodes`` is not a non-negative integer, or ``edge_index`` is not an
            integer array of shape ``(2, E)`` with values in ``[0, num_nodes)``.
    """
    if not isinstance(num_nodes, Integral) or isinstance(num_nodes, bool) or num_nodes < 0:
        raise InputError(f"number of nodes must be an integer >= 0 (got {num_nodes!r})")
    if hasattr(edge_index, "detach"):  # a torch tensor, possibly on an accelerator
        edge_index = edge_index.detach().cpu().numpy()
    edges = np.asarray(edge_index)
    if edges.ndim != 2 or edges.shape[0] != 2:
        raise InputError(f"edge_index must have shape (2, E) (got {tuple(edges.shape)})")
    if edges.size and not np.issubdtype(edges.dtype, np.integer):
        raise InputError(f"edge_index must hold integers (got {edges.dtype})")
    edges = edges.astype(np.int64, copy=False)
    if edges.size and (edges.min() < 0 or edges.max() >= num_nodes):
        bad = edges.min() if edges.min() < 0 else edges.max()
        raise InputError(f"edge_index values must be in [0, {num_nodes}) (got {bad})")
    return edges


def _fill_empty_parts(
    part: np.ndarray, n_parts: int, weights: np.ndarray, degree: np.ndarray
) -> np.ndarray:
    """Moves one node into each empty part, taken from the heaviest part with two or more nodes.

    The node moved is the donor's lowest-degree node (lowest id on ties): it cuts the fewest new
    edges (none for an isolated node). Needs ``len(part) >= n_parts``, so a donor always exists.
    """
    counts = np.bincount(part, minlength=n_parts)
    empty = np.flatnonzero(counts == 0)
    if empty.size == 0:
        return part
    part = part.copy()
    load = np.bincount(part, weights=weights, minlength=n_parts)
    for target in empty:
        donor = int(np.argmax(np.where(counts >= 2, load, -1.0)))
        members = np.flatnonzero(part == donor)
        node = members[np.argmin(degree[members])]
        part[node] = target
        counts[donor] -= 1
        counts[target] += 1
        load[donor] -= weights[node]
        load[target] += weights[node]
    return part


def _part_graph(n_parts: int, xadj: np.ndarray, adjncy: np.ndarray, **kwargs: object) -> object:
    """``pymetis.part_graph`` with the graph passed the way the installed pymetis takes it."""
    if hasattr(pymetis, "CSRAdjacency"):  # pymetis >= 2025.2 deprecates xadj=/adjncy=
        return pymetis.part_graph(
            n_parts, pymetis.CSRAdjacency(adj_starts=xadj, adjacent=adjncy), **kwargs
        )
    return pymetis.part_graph(n_parts, xadj=xadj, adjncy=adjncy, **kwargs)


def _check_n_parts(n_parts: object) -> None:
    if not isinstance(n_parts, Integral) or isinstance(n_parts, bool):
        raise InputError(f"parts must be an integer (got {n_parts!r})")
    if n_parts < 1:
        raise InputError(f"parts must be >= 1 (got {n_parts})")


def check_seed(seed: object) -> None:
    """Raises InputError unless ``seed`` is an integer METIS takes, in ``[0, 2**31)``."""
    if not isinstance(seed, Integral) or isinstance(seed, bool) or not 0 <= seed <= _IDX_MAX:
        raise InputError(f"seed must be an integer in [0, 2**31) (got {seed!r})")
