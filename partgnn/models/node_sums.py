"""Edge rows summed into their nodes, by source and by target node in one call (``model.fused``).

The Interaction Network sums edge latents into their target and source nodes at every step, and
the gradient of a gather of node rows per edge is the same kind of sum. ``index_add_`` walks the
edges and adds each row into memory; the kernel (``kernels/node_sums.cpp``) walks the nodes and
holds each node's sum in registers, its edges listed contiguously by an :class:`Incidence` made
once per graph and forward pass: deterministic (a node's edges are added in their order, as
``index_add_`` adds them), split between threads by node, bf16 rows summed in float32 and rounded
once. Where the kernel does not run (a GPU), :func:`bag_sums` sums each node's listed edges with
``embedding_bag``, also without atomic adds.

Glossary: ``rows`` one row per edge ``(E, W)``; ``src``/``dst`` ``(E,)`` node indices.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional

from partgnn.models.cpu_kernels import load_kernels
from partgnn.models.kernel_choice import cpp_kernels_on


@dataclass(frozen=True)
class NodeEdges:
    """The edges of every node by one endpoint, listed node after node (a CSR).

    Attributes:
        ptr: Node ``n``'s edges are ``order[ptr[n]:ptr[n + 1]]`` ``(N + 1,)``.
        order: Edge indices sorted by the endpoint, stable ``(E,)``; ``None`` when the edges
            are sorted by it already.
    """

    ptr: torch.Tensor
    order: torch.Tensor | None

    @classmethod
    def of(cls, index: torch.Tensor, n_nodes: int) -> NodeEdges:
        """The CSR of edges whose endpoint is ``index`` ``(E,)``, values in ``[0, n_nodes)``
        (checked where the C++ kernel runs; elsewhere, a GPU, made without reading anything
        back to the host)."""
        if not cpp_kernels_on(index.device):
            ordered, order = torch.sort(index, stable=True)
            nodes = torch.arange(n_nodes + 1, device=index.device, dtype=index.dtype)
            return cls(torch.searchsorted(ordered, nodes), order)
        counts = torch.bincount(index, minlength=n_nodes)
        if counts.shape[0] != n_nodes:
            raise ValueError(f"node index {int(index.max())} out of range for {n_nodes} nodes")
        ptr = index.new_zeros(n_nodes + 1)
        torch.cumsum(counts, 0, out=ptr[1:])
        in_order = index.numel() < 2 or bool((index[1:] >= index[:-1]).all())
        return cls(ptr, None if in_order else torch.argsort(index, stable=True))

    def edge_order(self, n_edges: int) -> torch.Tensor:
        """:attr:`order`, or ``arange(n_edges)`` where the edges are in order already."""
        if self.order is not None:
            return self.order
        return torch.arange(n_edges, device=self.ptr.device, dtype=self.ptr.dtype)


@dataclass(frozen=True)
class Incidence:
    """The edges of every node by source and by target (:class:`NodeEdges` each)."""

    by_src: NodeEdges
    by_dst: NodeEdges

    @classmethod
    def of(cls, src: torch.Tensor, dst: torch.Tensor, n_nodes: int) -> Incidence:
        """Of edges ``src -> dst`` ``(E,)`` each, between nodes ``[0, n_nodes)``."""
        return cls(NodeEdges.of(src, n_nodes), NodeEdges.of(dst, n_nodes))

    @property
    def n_nodes(self) -> int:
        return self.by_src.ptr.shape[0] - 1

    def serves(self, rows: torch.Tensor, n_nodes: int) -> bool:
        """Whether the kernel sums ``rows`` into ``n_nodes`` nodes with this listing."""
        return self.n_nodes == n_nodes and kernel_applies(rows)


def bag_sums(rows: torch.Tensor, incidence: Incidence) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`sums_by_node` where the C++ kernel does not run (a GPU): each node's edges are
    one bag of ``embedding_bag``'s sum (one kernel per direction, no atomic adds: deterministic;
    bf16 rows accumulated in float32 on CUDA, rounded once).

    Args:
        rows: One row per edge ``(E, W)``.
        incidence: Of the same edges.

    Returns:
        ``(incoming, outgoing)``, each ``(N, W)`` in ``rows``' dtype; nodes without edges get
        zeros.
    """
    n_edges = rows.shape[0]
    return tuple(
        functional.embedding_bag(edges.edge_order(n_edges), rows, edges.ptr, mode="sum",
                                 include_last_offset=True)
        for edges in (incidence.by_dst, incidence.by_src)
    )  # fmt: skip


def kernel_applies(rows: torch.Tensor) -> bool:
    """Whether the kernel sums ``rows``: a CPU matrix of float64, float32 or bf16 (not on the
    GPU's paths, :func:`~partgnn.models.kernel_choice.gpu_kernel_paths`)."""
    return (
        cpp_kernels_on(rows.device)
        and rows.dim() == 2
        and rows.dtype in (torch.float64, torch.float32, torch.bfloat16)
    )


def sums_by_node(rows: torch.Tensor, incidence: Incidence) -> tuple[torch.Tensor, torch.Tensor]:
    """Each node's sum of its edges' rows, over its incoming and its outgoing edges.

    Args:
        rows: One row per edge ``(E, W)`` (:func:`kernel_applies`).
        incidence: Of the same edges.

    Returns:
        ``(incoming, outgoing)``, each ``(N, W)`` in ``rows``' dtype (bf16 summed in float32);
        nodes without edges get zeros.
    """
    load_kernels()
    by_dst, by_src = incidence.by_dst, incidence.by_src
    return torch.ops.partgnn.node_sums(rows, by_dst.ptr, by_dst.order, by_src.ptr, by_src.order)
