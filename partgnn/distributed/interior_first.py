"""The local edges of a partition in the order that overlaps the halo exchange: interior first.

With the exchange overlapped, a model computes the interior edges (both endpoints owned, no halo
row needed) while the halo rows are in flight, then the boundary edges. :class:`InteriorFirst`
is that order, built once per event on the host from the partition plan's interior mask and
checked against the edges it orders (:meth:`InteriorFirst.of_plan_edges`), so a forward pass
neither sorts nor reads the mask back from the device. The training item carries it beside the
edges (:class:`~partgnn.train.items.train_item.TrainItem`), not the exchange.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True, eq=False)
class InteriorFirst:
    """A stable order of a rank's local edges with the interior ones first.

    Attributes:
        order: Positions of the edges in the stored order, interior edges first ``(E_local,)``.
        inverse: The inverse permutation ``(E_local,)``: ``reordered[inverse]`` is back in the
            stored order.
        n_interior: How many edges are interior (the first ``n_interior`` of ``order``).
    """

    order: torch.Tensor
    inverse: torch.Tensor
    n_interior: int

    @classmethod
    def from_interior_mask(
        cls, interior: np.ndarray, device: torch.device | str = "cpu"
    ) -> InteriorFirst:
        """The order of a plan's interior-edge mask ``(E_local,)`` (bool, on the host)."""
        interior = np.asarray(interior, dtype=bool)
        order = np.concatenate([np.flatnonzero(interior), np.flatnonzero(~interior)])
        inverse = np.empty_like(order)
        inverse[order] = np.arange(order.shape[0])
        return cls(
            order=torch.from_numpy(order).to(device),
            inverse=torch.from_numpy(inverse).to(device),
            n_interior=int(interior.sum()),
        )

    @classmethod
    def of_plan_edges(
        cls,
        interior: np.ndarray,
        edge_index: torch.Tensor,
        n_owned: int,
        device: torch.device | str = "cpu",
    ) -> InteriorFirst:
        """The order of a plan's interior-edge mask ``(E_local,)``, checked against the local
        edges it orders ``(2, E_local)`` (on the host), whose first ``n_owned`` nodes are owned.

        Raises:
            ValueError: The mask is not that of these edges (another event's, or edges
                renumbered without it).
        """
        edges = edge_index.numpy() if isinstance(edge_index, torch.Tensor) else edge_index
        interior = np.asarray(interior, dtype=bool)
        if interior.shape != (edges.shape[1],) or not np.array_equal(
            interior, (edges < n_owned).all(axis=0)
        ):
            raise ValueError(
                f"interior-first order: the mask ({interior.shape[0]} edges, "
                f"{int(interior.sum())} interior) is not that of these {edges.shape[1]} edges "
                f"with {n_owned} owned nodes"
            )
        return cls.from_interior_mask(interior, device)

    @classmethod
    def of_edges(cls, edge_index: torch.Tensor, n_owned: int) -> InteriorFirst:
        """The order of local edges ``(2, E_local)`` whose first ``n_owned`` nodes are owned
        (reads the mask on the host: what a forward pass without a precomputed order pays)."""
        interior = (edge_index < n_owned).all(dim=0)
        return cls.from_interior_mask(interior.cpu().numpy(), edge_index.device)

    def matches(self, edge_index: torch.Tensor) -> bool:
        """Whether this order is over as many edges as ``edge_index`` ``(2, E)`` holds."""
        return self.order.shape[0] == edge_index.shape[1]
