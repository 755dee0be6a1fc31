"""A rank's training item padded to a few fixed shapes, so that one captured CUDA graph serves
every event of a shape (:mod:`partgnn.train.captured_step`).

A CUDA graph replays fixed kernels on fixed buffers: the tensors' sizes, the exchange's split
sizes and every host integer the forward pass slices by are frozen at capture. Events differ in
all of them, so :func:`pad_item` rounds each up to a *padded shape*: a few values per octave
(:func:`shape_bucket`, at most ``1 / steps_per_octave`` larger). The padding contributes exactly
nothing to the step:

- **Nodes**: padding rows are appended to the owned rows (always at least one: the *pad node*)
  with zero features; they are never sent to a peer as a real row. Each peer's block of halo rows
  is padded on its own (the sender pads its rows to that peer with copies of the pad node, the
  receiver expects as many: both round the same count), so the halo rows of every real edge are
  renumbered into their padded blocks.
- **Edges**: padding edges are self-loops of the pad node with zero features; the interior and
  the boundary part of the interior-first order are padded separately, so the count of interior
  edges, which the model slices by, is a padded shape too. A padding edge reaches only the pad
  node; no real node aggregates a padding message.
- **Loss**: every edge is "counted" and the loss weights carry what was selected before: a real
  counted edge its weight, any other edge 0 (a weighted sum of the same terms, whose gradient on
  a padding or uncounted edge is 0). The normaliser is a 0-dim tensor (a replay reads it from
  its buffer, not from the capture).

Real rows and edges keep their values; the sums over them gain zero terms, so a padded step
equals the unpadded one up to the order of a reduction's additions (the float64 multi-process
test: tests/train/items/test_padded_items.py). What padding cannot keep equal: BatchNorm's
statistics (the rows it averages would include padding rows), so a model with ``batch_norm`` is not
padded (:func:`padding_refusal`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from partgnn.distributed.exchange_plan import ExchangePlan
from partgnn.distributed.halo_exchange import HaloExchanger
from partgnn.distributed.interior_first import InteriorFirst
from partgnn.train.items.train_item import TrainItem
from partgnn.train.loss import EdgeWeights, default_edge_weight

#: Padded shapes per octave: a padded count is at most 25 % larger than the real one.
STEPS_PER_OCTAVE = 4
#: The smallest nonzero padded shape.
SMALLEST_SHAPE = 16


def shape_bucket(
    count: int, *, steps_per_octave: int = STEPS_PER_OCTAVE, smallest: int = SMALLEST_SHAPE
) -> int:
    """The padded shape of ``count``: 0 stays 0, else the smallest of ``smallest`` and the values
    ``2**k + j * 2**k / steps_per_octave`` (``j < steps_per_octave``) that is at least ``count``.

    Args:
        count: A size (rows, edges, rows sent to one peer).
        steps_per_octave: Shapes between two powers of two (a power of two).
        smallest: The smallest nonzero shape.

    Returns:
        The padded size, ``>= count``, at most ``count * (1 + 1 / steps_per_octave)`` above
        ``smallest``.
    """
    if count < 0:
        raise ValueError(f"shape_bucket: a count cannot be negative ({count})")
    if steps_per_octave < 1 or steps_per_octave & (steps_per_octave - 1):
        raise ValueError(
            f"shape_bucket: steps_per_octave must be a power of two ({steps_per_octave})"
        )
    if count == 0:
        return 0
    if count <= smallest:
        return smallest
    octave = count.bit_length() - 1
    step = max(1, (1 << octave) // steps_per_octave)
    return -(-count // step) * step


@dataclass(frozen=True)
class PaddedShape:
    """What a captured step is frozen to: every size and host integer of a padded item.

    Attributes:
        n_owned: Owned rows, padding rows included.
        send_counts: Rows sent to each peer (``()``: no exchange).
        recv_counts: Rows received from each peer.
        n_edges: Local edges.
        n_interior: Edges in the interior part of the interior-first order (``None``: no order).
    """

    n_owned: int
    send_counts: tuple[int, ...]
    recv_counts: tuple[int, ...]
    n_edges: int
    n_interior: int | None


@dataclass(frozen=True)
class PaddedItem:
    """An item padded to its shape.

    Attributes:
        item: The padded item (every edge counted; loss weights zero on padding and uncounted
            edges; ``normaliser`` a 0-dim tensor).
        shape: Its padded shape.
        n_edges: The real item's edges (the first ``n_edges`` of the padded item's, in order).
        n_nodes: The real item's rows.
    """

    item: TrainItem
    shape: PaddedShape
    n_edges: int
    n_nodes: int


def padding_refusal(batch_norm: bool) -> str | None:
    """Why a model cannot be padded (``None``: it can): BatchNorm averages over rows, and
    padding rows would change its statistics."""
    if batch_norm:
        return "model.batch_norm averages over rows, and padding rows would change its statistics"
    return None


def pad_item(item: TrainItem, weights: EdgeWeights, dtype: torch.dtype) -> PaddedItem:
    """``item`` padded to its :class:`PaddedShape` (the module docstring says how).

    Args:
        item: A rank's item: a whole graph (no exchange) or a halo part with a
            :class:`~partgnn.distributed.halo_exchange.HaloExchanger`.
        weights: The loss weights (where the item has no per-edge weights).
        dtype: The loss's dtype (of the weights and the normaliser).

    Raises:
        ValueError: The item's exchange is neither absent nor a ``HaloExchanger``.
    """
    exchange = item.exchange
    if exchange is not None and not isinstance(exchange, HaloExchanger):
        raise ValueError(f"pad_item: cannot pad an item with a {type(exchange).__name__}")
    device = item.x.device
    n_nodes, n_edges = item.x.shape[0], item.edge_index.shape[1]
    n_owned = int(item.n_owned)
    padded_owned = shape_bucket(n_owned + 1)  # at least the pad node
    pad_node = n_owned
    if exchange is None:
        send_counts: tuple[int, ...] = ()
        recv_counts: tuple[int, ...] = ()
        local_rows = torch.arange(n_nodes, device=device)
        send_index = None
        padded_rows = padded_owned
    else:
        plan = exchange.plan
        send_counts = tuple(shape_bucket(c) for c in plan.send_counts)
        recv_counts = tuple(shape_bucket(c) for c in plan.recv_counts)
        halo_rows = _padded_blocks(plan.recv_counts, recv_counts)
        local_rows = torch.from_numpy(
            np.concatenate([np.arange(n_owned), padded_owned + halo_rows])
        ).to(device)
        send_index = _padded_send_index(plan, send_counts, pad_node)
        padded_rows = padded_owned + sum(recv_counts)
    order, n_interior, padded_edges = _padded_edges(item, n_edges)
    edge_index = torch.full((2, padded_edges), pad_node, dtype=item.edge_index.dtype, device=device)
    edge_index[:, :n_edges] = local_rows[item.edge_index]
    x = item.x.new_zeros((padded_rows, item.x.shape[1]))
    x[local_rows] = item.x
    y_loss = item.y.to(dtype)
    real_weight = (
        default_edge_weight(y_loss, weights.pos_weight)
        if item.weight is None
        else item.weight.to(dtype)
    )
    real_weight = real_weight * item.counted.to(dtype)
    padded = TrainItem(
        event_id=item.event_id,
        x=x,
        edge_index=edge_index,
        edge_attr=_padded_rows(item.edge_attr, padded_edges),
        y=_padded_rows(item.y, padded_edges),
        counted=torch.ones(padded_edges, dtype=torch.bool, device=device),
        boundary=_padded_rows(item.boundary, padded_edges),
        normaliser=torch.tensor(float(item.normaliser), dtype=dtype, device=device),
        event_normaliser=item.event_normaliser,
        exchange=None if exchange is None else _padded_exchange(
            exchange, padded_owned, sum(recv_counts), send_index, send_counts, recv_counts
        ),
        interior_first=order,
        n_owned=padded_owned,
        n_counted=padded_edges,
        weight=_padded_rows(real_weight, padded_edges),
        edge_ids=None if item.edge_ids is None
        else _padded_rows(item.edge_ids, padded_edges, fill=-1),
    )  # fmt: skip
    shape = PaddedShape(padded_owned, send_counts, recv_counts, padded_edges, n_interior)
    return PaddedItem(padded, shape, n_edges, n_nodes)


def _padded_blocks(counts: tuple[int, ...], padded: tuple[int, ...]) -> np.ndarray:
    """Where each row of blocks of ``counts`` rows lands when every block is padded to
    ``padded`` rows ``(sum(counts),)``."""
    starts = np.concatenate([[0], np.cumsum(padded)[:-1]]).astype(np.int64)
    return np.concatenate(
        [start + np.arange(count) for start, count in zip(starts, counts, strict=True)]
        or [np.zeros(0, dtype=np.int64)]
    ).astype(np.int64)


def _padded_send_index(
    plan: ExchangePlan, send_counts: tuple[int, ...], pad_node: int
) -> torch.Tensor:
    """The plan's send index with each peer's block padded by copies of the pad node."""
    send_index = plan.send_index.new_full((sum(send_counts),), pad_node)
    positions = _padded_blocks(plan.send_counts, send_counts)
    send_index[torch.from_numpy(positions).to(send_index.device)] = plan.send_index
    return send_index


def _padded_edges(item: TrainItem, n_edges: int) -> tuple[InteriorFirst | None, int | None, int]:
    """The padded interior-first order, its interior count and the padded edge count. Real
    edges keep their positions; padding edges follow them. With an interior-first order, the
    padding edges of the interior part come first, then those of the boundary part."""
    device = item.edge_index.device
    order = item.interior_first
    if order is None:
        return None, None, shape_bucket(n_edges)
    n_interior, n_boundary = order.n_interior, n_edges - order.n_interior
    padded_interior, padded_boundary = shape_bucket(n_interior), shape_bucket(n_boundary)
    padded_edges = padded_interior + padded_boundary
    interior_pads = torch.arange(n_edges, n_edges + padded_interior - n_interior, device=device)
    boundary_pads = torch.arange(
        n_edges + padded_interior - n_interior, padded_edges, device=device
    )
    new_order = torch.cat(
        [order.order[:n_interior], interior_pads, order.order[n_interior:], boundary_pads]
    )
    inverse = torch.empty_like(new_order)
    inverse[new_order] = torch.arange(padded_edges, device=device)
    padded_order = InteriorFirst(order=new_order, inverse=inverse, n_interior=padded_interior)
    return padded_order, padded_interior, padded_edges


def _padded_rows(values: torch.Tensor, rows: int, fill: float = 0) -> torch.Tensor:
    """``values`` ``(E, *)`` followed by rows of ``fill``, ``(rows, *)``."""
    padded = values.new_full((rows, *values.shape[1:]), fill)
    padded[: values.shape[0]] = values
    return padded


def _padded_exchange(
    exchange: HaloExchanger,
    n_owned: int,
    n_halo: int,
    send_index: torch.Tensor | None,
    send_counts: tuple[int, ...],
    recv_counts: tuple[int, ...],
) -> HaloExchanger:
    """The item's exchanger on the padded rows and blocks."""
    assert send_index is not None
    return exchange.on_plan(ExchangePlan(n_owned, n_halo, send_index, send_counts, recv_counts))
