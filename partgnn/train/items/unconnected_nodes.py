"""Leaving out the nodes that no edge touches: they change no edge's score.

A full event graph built with a module map holds every hit, and about half of them are reached
by no candidate edge (51,939 of the 110,574 nodes of a pile-up-200 graph of the full recipe's
map). Each still costs the node MLPs of every message-passing step, and nothing computed for it
reaches an edge: messages flow along edges only and the classifier reads edge states. When the
model computes a node's state from its own row and its edges' messages alone
(:attr:`~partgnn.models.config.ModelConfig.skips_unconnected_nodes`), a training item leaves
those nodes out and every edge's logit is the one the whole graph gives (tests: full training
with and without them; halo training, which leaves them out on every rank, against full mode;
naive, overlapping-sector and ddp training run with them left out).

On a rank the nodes left out are owned ones: a halo node is the far end of a local edge, and an
owned node sent to a peer is an endpoint of a cut edge, which both ranks hold. So the kept rows
are the connected owned nodes, then every halo node in its slot; the halo plan's local indices
(edges, send lists) are renumbered, its halo groups are untouched. The input statistics
(:func:`~partgnn.train.items.standardisation.fit_feature_statistics`) still count the nodes left
out, in their original order (:meth:`~partgnn.train.items.train_item.TrainItem.owned_features`):
leaving them out changes how the step is computed, not what is learned.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from partgnn.partition.halo_plan import HaloPlan


@dataclass(frozen=True)
class ConnectedRows:
    """Which rows of a rank's graph some edge touches, and their new numbering.

    Attributes:
        keep: Rows kept ``(N,)``: the owned rows an edge touches, and every row past the owned
            ones (halo or margin nodes).
        new_index: Each row's index among the kept ones, -1 where left out ``(N,)``.
        n_owned_before: Owned rows of the graph (its first rows).
        n_owned: Owned rows kept (they stay first).
    """

    keep: torch.Tensor
    new_index: torch.Tensor
    n_owned_before: int
    n_owned: int

    @property
    def owned_kept(self) -> torch.Tensor:
        """Which owned rows are kept, in their order ``(n_owned_before,)``."""
        return self.keep[: self.n_owned_before]

    def rows(self, values: torch.Tensor) -> torch.Tensor:
        """The kept rows of ``values`` ``(N, *)``."""
        return values[self.keep]

    def left_out(self, values: torch.Tensor) -> torch.Tensor:
        """The owned rows of ``values`` ``(N, *)`` left out, in their order."""
        return values[: self.n_owned_before][~self.owned_kept]

    def renumbered(self, edge_index: torch.Tensor) -> torch.Tensor:
        """``edge_index`` ``(2, E)`` in the kept rows' numbering."""
        return self.new_index[edge_index]

    def plan(self, plan: HaloPlan) -> HaloPlan:
        """``plan`` without the owned nodes left out: its edges and send lists renumbered, its
        halo groups as they were."""
        new_index = self.new_index.numpy()
        return dataclasses.replace(
            plan,
            owned_nodes=plan.owned_nodes[self.owned_kept.numpy()],
            edge_index=new_index[plan.edge_index],
            send_index=new_index[plan.send_index],
        )


def connected_rows(edge_index: torch.Tensor, n_nodes: int, n_owned: int) -> ConnectedRows | None:
    """The rows to keep of a graph of ``n_nodes`` rows whose first ``n_owned`` are owned.

    Args:
        edge_index: Local edges ``(2, E)`` (CPU).
        n_nodes: Rows of the graph.
        n_owned: Owned rows (the first ones); the rows after them are always kept.

    Returns:
        The rows, or ``None`` when every owned row is connected, or none is (nothing to leave
        out, or nothing left to compute: the item stays as it is).
    """
    keep = torch.zeros(n_nodes, dtype=torch.bool)
    keep[edge_index.reshape(-1)] = True
    keep[n_owned:] = True
    n_kept_owned = int(keep[:n_owned].sum())
    if n_kept_owned in (n_owned, 0):
        return None
    new_index = torch.full((n_nodes,), -1, dtype=torch.int64)
    new_index[keep] = torch.arange(int(keep.sum()), dtype=torch.int64)
    return ConnectedRows(keep=keep, new_index=new_index, n_owned_before=n_owned,
                         n_owned=n_kept_owned)  # fmt: skip
