"""A halo exchange whose results a recomputed forward pass gets again without communicating.

Activation recomputation over several message-passing steps (the Interaction Network with
``model.recompute``) runs again, in the backward pass, forward work that contains halo
exchanges. Repeating them would double the forward communication and, worse, need every rank
of the group to recompute the same region at the same time. :class:`ReplayedExchange` wraps a
rank's exchange: inside a recomputed region's forward pass it exchanges and records the halo rows
it received; in the region's recomputation it hands the recorded rows out again, in the same
order.

Only the halo rows are recorded (``n_halo x H`` per exchange, small next to the edge latents the
recomputation saves), and each region's record is released as it is replayed or when the
region's autograd graph goes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import torch

from partgnn.distributed.context import DistContext
from partgnn.distributed.exchange import ArrivingRows, Exchange
from partgnn.distributed.in_process_exchanges import ReceivedRows


class ReplayedExchange:
    """The :class:`~partgnn.distributed.exchange.Exchange` contract around a rank's exchange,
    recorded for the replay; see the module docstring.

    Args:
        exchange: The rank's halo exchange (on a whole graph,
            :class:`~partgnn.distributed.in_process_exchanges.NoExchange`).
        n_owned: Owned rows ``n_owned`` (the rows of ``x_owned``).
    """

    def __init__(self, exchange: Exchange, n_owned: int) -> None:
        self.exchange = exchange
        self.n_owned = n_owned
        self._recording: deque[torch.Tensor] | None = None
        self._replaying: deque[torch.Tensor] | None = None

    def region(self) -> tuple[AbstractContextManager, AbstractContextManager]:
        """The ``context_fn`` of one recomputed region (``torch.utils.checkpoint``): a
        context for its forward pass, which records, and one for its recomputation, which
        replays."""
        received: deque[torch.Tensor] = deque()
        return self._within("_recording", received), self._within("_replaying", received)

    @contextmanager
    def _within(self, mode: str, received: deque[torch.Tensor]) -> Iterator[None]:
        setattr(self, mode, received)
        try:
            yield
        finally:
            setattr(self, mode, None)

    @property
    def n_halo(self) -> int:
        return self.exchange.n_halo

    @property
    def hides_communication(self) -> bool:
        return self.exchange.hides_communication

    @property
    def context(self) -> DistContext | None:
        return self.exchange.context

    @property
    def send_index(self) -> torch.Tensor:
        return self.exchange.send_index

    def __call__(self, x_owned: torch.Tensor) -> torch.Tensor:
        if self._recording is None and self._replaying is None:
            return self.exchange(x_owned)
        return _RecordedCall.apply(self, x_owned)

    def start(self, x_owned: torch.Tensor) -> ReceivedRows | _Recorded:
        """Starts the wrapped exchange (replayed: nothing to start)."""
        if self._replaying is not None:
            return ReceivedRows(self._replayed())
        pending = self.exchange.start(x_owned)
        return pending if self._recording is None else _Recorded(pending, self._recording)

    def start_reverse(self, grad_halo: torch.Tensor) -> ArrivingRows:
        """The wrapped exchange's reverse exchange (the backward pass is never replayed)."""
        return self.exchange.start_reverse(grad_halo)

    def _replayed(self) -> torch.Tensor:
        if not self._replaying:
            raise RuntimeError("ReplayedExchange: the recomputation exchanges more than it did")
        return self._replaying.popleft()


class _Recorded:
    """An exchange in flight whose halo rows are recorded when they arrive."""

    def __init__(self, pending, received: deque[torch.Tensor]) -> None:
        self._pending, self._received = pending, received

    def wait(self) -> torch.Tensor:
        rows = self._pending.wait()
        self._received.append(rows.detach())
        return rows


class _RecordedCall(torch.autograd.Function):
    """A blocking exchange in a recomputed region: recorded, or replayed.

    The wrapped exchange runs on its own autograd graph, kept out of the checkpoint (its saved
    tensors are not dropped and recomputed): the recomputation, which does not run it, must
    save exactly the tensors the forward pass saved, in the same order, and this function saves
    none.
    """

    @staticmethod
    def forward(ctx, replay: ReplayedExchange, x_owned: torch.Tensor) -> torch.Tensor:
        ctx.graph = None
        if replay._replaying is not None:
            return torch.cat([x_owned, replay._replayed()])
        identity = torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)
        with torch.enable_grad(), identity:
            x_inner = x_owned.detach().requires_grad_(x_owned.requires_grad)
            x_local = replay.exchange(x_inner)
        if x_local.requires_grad:
            ctx.graph = (x_inner, x_local)
        replay._recording.append(x_local[replay.n_owned :].detach().clone())
        return x_local.detach()

    @staticmethod
    def backward(ctx, grad_local: torch.Tensor):
        if ctx.graph is None:
            return None, None
        x_inner, x_local = ctx.graph
        ctx.graph = None
        (grad_owned,) = torch.autograd.grad(x_local, x_inner, grad_local)
        return None, grad_owned
