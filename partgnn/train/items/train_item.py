"""One event as one rank trains on it (:class:`TrainItem`), and what every source needs to make one:
its tensors on the device, and its node fields with or without the nodes no edge touches.

The sources that make items, one per mode: :mod:`partgnn.train.items.whole_graph_source` and
:mod:`partgnn.train.items.shard_sources` (the package's docstring says what each holds).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from partgnn.distributed.exchange import Exchange
from partgnn.distributed.interior_first import InteriorFirst
from partgnn.train.items.unconnected_nodes import ConnectedRows
from partgnn.train.loss import EdgeWeights


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` on ``device``: to a GPU through pinned memory without blocking the host (the
    copy is ordered on the current stream: the read-ahead thread's own,
    :mod:`partgnn.train.items.item_cache`)."""
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


@dataclass
class TrainItem:
    """One event as one rank trains on it.

    Attributes:
        event_id: The event.
        x: Node features ``(N_local, F_node)``.
        edge_index: Local edges ``(2, E_local)``.
        edge_attr: Edge features ``(E_local, F_edge)``.
        y: Edge truth ``(E_local,)``.
        counted: Edges this rank counts in loss and metrics ``(E_local,)``.
        boundary: Edges crossing the partition boundary ``(E_local,)``.
        normaliser: Denominator of this rank's loss sum.
        event_normaliser: The whole event's weighted edge count (equal to ``normaliser`` except
            in naive mode, whose sectors normalise by their own count).
        exchange: The halo exchange (``None``: no exchange).
        interior_first: The local edges in the order that hides the exchange (interior edges
            first), checked against ``edge_index`` when built; ``None``: the model's own
            (none, or computed from the edges when it hides an exchange).
        n_owned: Rows of ``x`` this rank owns (the first ones; the others are halo or
            replicated margin nodes).
        lost_y: Truth of the boundary edges this rank should count but cannot score ``(L,)``.
        n_counted: How many edges ``counted`` marks (computed from it when not given).
        counted_index: The positions of the counted edges ``(n_counted,)``, or ``None`` when
            every edge is counted: computed once per event, so a training step selects its
            edges without reading the mask on the host (a synchronisation on GPUs).
        weight: Each local edge's loss weight ``(E_local,)``, or ``None`` when true edges
            weigh ``pos_weight`` and false ones 1 (:meth:`EdgeWeights.per_edge`).
        owned_kept: Which of the rank's owned nodes ``x`` holds, in their order
            ``(n_owned + U,)``, or ``None`` when it holds them all: the ``U`` that no edge
            touches are left out (:mod:`partgnn.train.items.unconnected_nodes`).
        unconnected_x: Features of the owned nodes left out, in their order ``(U, F_node)``
            (the input statistics count them: :meth:`owned_features`).
        edge_ids: The local edges' ids in the event's whole graph ``(E_local,)``, when asked
            for (scoring: ``item(index, edge_ids=True)``); training items have none.
    """

    event_id: int
    x: torch.Tensor
    edge_index: torch.Tensor
    edge_attr: torch.Tensor
    y: torch.Tensor
    counted: torch.Tensor
    boundary: torch.Tensor
    normaliser: float
    event_normaliser: float
    exchange: Exchange | None = None
    interior_first: InteriorFirst | None = None
    n_owned: int | None = None
    lost_y: torch.Tensor | None = None
    n_counted: int | None = None
    counted_index: torch.Tensor | None = None
    weight: torch.Tensor | None = None
    owned_kept: torch.Tensor | None = None
    unconnected_x: torch.Tensor | None = None
    edge_ids: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.n_owned is None:
            self.n_owned = self.x.shape[0]
        if self.n_counted is None:
            self.n_counted = int(self.counted.sum())
        if self.n_counted < self.counted.shape[0]:
            self.counted_index = self.counted.nonzero().squeeze(1)

    def owned_features(self) -> torch.Tensor:
        """The features of every node the rank owns, those left out of ``x`` too, in their
        order ``(n_owned + U, F_node)``."""
        owned = self.x[: self.n_owned]
        if self.owned_kept is None or self.unconnected_x is None:
            return owned
        rows = owned.new_empty((self.owned_kept.shape[0], owned.shape[1]))
        rows[self.owned_kept] = owned
        rows[~self.owned_kept] = self.unconnected_x
        return rows

    def select_counted(self, values: torch.Tensor) -> torch.Tensor:
        """The rows of ``values`` ``(E_local, *)`` of the counted edges ``(n_counted, *)``."""
        if self.counted_index is None:
            return values
        return values.index_select(0, self.counted_index)


def node_fields(
    rows: ConnectedRows | None,
    x: torch.Tensor,
    edge_index: torch.Tensor,
    n_owned: int,
    device: torch.device,
    *,
    renumbered: torch.Tensor | None = None,
) -> dict[str, torch.Tensor | int | None]:
    """A :class:`TrainItem`'s ``x``, ``edge_index``, ``n_owned``, ``owned_kept`` and
    ``unconnected_x`` on ``device``: the graph's, or without the nodes ``rows`` leaves out
    (``renumbered``: ``rows.renumbered(edge_index)`` when the caller has it already)."""
    if rows is None:
        return {
            "x": to_device(x, device), "edge_index": to_device(edge_index, device),
            "n_owned": n_owned,
        }  # fmt: skip
    return {
        "x": to_device(rows.rows(x), device),
        "edge_index": to_device(
            rows.renumbered(edge_index) if renumbered is None else renumbered, device
        ),
        "n_owned": rows.n_owned,
        "owned_kept": to_device(rows.owned_kept, device),
        "unconnected_x": to_device(rows.left_out(x), device),
    }


def edge_weights(
    weights: EdgeWeights, y: torch.Tensor, edge_pt: torch.Tensor, device: torch.device
) -> torch.Tensor | None:
    """Each edge's loss weight on ``device`` ``(E,)``, or None where every edge weighs 1."""
    per_edge = weights.per_edge(y, edge_pt)
    return None if per_edge is None else to_device(per_edge, device)
