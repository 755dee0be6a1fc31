"""Exchanges within one process, under the one contract
(:class:`~partgnn.distributed.exchange.Exchange`): :class:`NoExchange` for a whole graph (no
halo rows: what a model is given when nothing is partitioned) and :class:`LoopbackExchange`,
whose halo rows are copies of owned ones (a model runs its halo path without peers: the memory
planner's probe)."""

from __future__ import annotations

import torch

from partgnn.distributed.context import DistContext


class ReceivedRows:
    """Rows already here (a replayed or in-process exchange): ``wait()`` returns them."""

    def __init__(self, rows: torch.Tensor) -> None:
        self._rows = rows

    def wait(self) -> torch.Tensor:
        return self._rows


class NoExchange:
    """The exchange of a whole graph: every row is owned, none is received.

    The blocking call returns the owned rows themselves (the same tensor); a started exchange
    brings no rows.

    Args:
        n_owned: The graph's rows (nodes).
    """

    hides_communication = False
    context: DistContext | None = None  # no peers

    def __init__(self, n_owned: int) -> None:
        self.n_owned = n_owned
        self.n_halo = 0

    @property
    def send_index(self) -> torch.Tensor:
        """No row is sent: ``(0,)`` int64."""
        return torch.zeros(0, dtype=torch.long)

    def __call__(self, x_owned: torch.Tensor) -> torch.Tensor:
        return x_owned

    def start(self, x_owned: torch.Tensor) -> ReceivedRows:
        return ReceivedRows(x_owned.new_zeros((0, *x_owned.shape[1:])))

    def start_reverse(self, grad_halo: torch.Tensor) -> ReceivedRows:
        return ReceivedRows(grad_halo.new_zeros((0, *grad_halo.shape[1:])))


class LoopbackExchange:
    """A halo exchange within one process: the halo rows are copies of owned rows
    ``send_index``, so a model runs its halo path (blocking, or hiding communication) without
    peers.

    Args:
        send_index: Owned row each halo row copies ``(n_halo,)``.
        n_owned: Owned rows.
        hide_communication: Offer the path that hides communication (``start`` /
            ``start_reverse``): the exchange's ``hides_communication``.
    """

    def __init__(self, send_index: torch.Tensor, n_owned: int, *, hide_communication: bool) -> None:
        self.send_index = send_index
        self.n_owned = n_owned
        self.n_halo = int(send_index.shape[0])
        self.hides_communication = hide_communication
        self.context: DistContext | None = None  # no peers

    def __call__(self, x_owned: torch.Tensor) -> torch.Tensor:
        return torch.cat([x_owned, x_owned[self.send_index]])

    def start(self, x_owned: torch.Tensor) -> ReceivedRows:
        return ReceivedRows(x_owned.detach()[self.send_index].clone())

    def start_reverse(self, grad_halo: torch.Tensor) -> ReceivedRows:
        # Rows sent = halo rows here: each halo row's gradient returns to the row it copies.
        return ReceivedRows(grad_halo.clone())
