"""The node -> part assignment of an event graph, by any partition method (the public entry point).

:func:`partition_graph` checks its arguments and the graph fields the method needs, then calls
METIS (:mod:`partgnn.partition.metis`) or the geometric sectors
(:mod:`partgnn.partition.geometric`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from partgnn.errors import InputError
from partgnn.partition.geometric import GEOMETRIC_METHODS, check_pos, geometric_partition
from partgnn.partition.metis import check_seed, metis_partition

if TYPE_CHECKING:
    from torch_geometric.data import Data

#: Partition methods: METIS k-way, phi wedges, eta slices, a phi x eta grid.
METHODS: tuple[str, ...] = ("metis", *GEOMETRIC_METHODS)


def partition_graph(
    graph: Data,
    n_parts: int,
    method: str = "metis",
    *,
    seed: int = 0,
    grid: tuple[int, int] | None = None,
) -> np.ndarray:
    """Assigns every node of a graph to one of ``n_parts`` parts.

    Every method is deterministic: the same graph, ``n_parts``, method, seed and grid give the
    same assignment in any process. ``n_parts`` may exceed the number of nodes (some parts are
    then empty); isolated nodes, graphs without edges and graphs without nodes are fine.

    Args:
        graph: Event graph with ``num_nodes`` nodes; ``"metis"`` reads ``edge_index``
            ``(2, E)``, the geometric methods read ``pos`` ``(N, 3)``, hit ``(x, y, z)`` in mm.
        n_parts: Number of parts ``P >= 1``.
        method: One of :data:`METHODS`: ``"metis"`` (k-way, balanced in work: each rank's
            edges, owned and halo nodes; :mod:`partgnn.partition.metis`), ``"phi"`` (``P``
            wedges), ``"eta"`` (``P`` slices) or ``"phieta"`` (a phi x eta grid); geometric
            boundaries sit at population quantiles, so parts are balanced in nodes.
        seed: METIS seed, in ``[0, 2**31)``; the geometric methods use no randomness.
        grid: ``(n_phi, n_eta)`` for ``"phieta"`` with ``n_phi * n_eta == P``; default the
            most square grid with ``n_phi >= n_eta`` (8 -> 4x2).

    Returns:
        Part of every node, shape ``(N,)``, int64 in ``[0, n_parts)``.

    Raises:
        InputError: One line naming the field, if the method is unknown, ``n_parts < 1``, the
            seed or grid is invalid, or the graph lacks a field the method needs or has a
            malformed one.
    """
    if method not in METHODS:
        raise InputError(f"unknown partition method {method!r} (choose {', '.join(METHODS)})")
    # The seed is checked for every method, so a bad one never passes silently.
    check_seed(seed)
    num_nodes = _num_nodes(graph)
    if method == "metis":
        if grid is not None:
            raise InputError("a sector grid applies to method 'phieta' only (got method 'metis')")
        edge_index = getattr(graph, "edge_index", None)
        if edge_index is None:  # a graph of isolated nodes
            edge_index = np.zeros((2, 0), dtype=np.int64)
        return metis_partition(edge_index, num_nodes, n_parts, seed=seed)
    if getattr(graph, "pos", None) is None:
        raise InputError(f"graph has no 'pos' (hit positions), which method {method!r} needs")
    pos = check_pos(graph.pos)
    if pos.shape[0] != num_nodes:
        raise InputError(f"pos has {pos.shape[0]} rows for {num_nodes} nodes")
    return geometric_partition(pos, n_parts, method, grid=grid)


def _num_nodes(graph: Data) -> int:
    num_nodes = getattr(graph, "num_nodes", None)
    if num_nodes is None:
        raise InputError("graph has no nodes field ('x', 'pos' or 'num_nodes')")
    return int(num_nodes)
