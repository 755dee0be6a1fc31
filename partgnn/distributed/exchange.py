"""The one contract of a halo exchange: what a model may call on the exchange it is given.

A rank holds ``n_owned`` rows of an event's nodes and needs ``n_halo`` more, owned by other
ranks. An :class:`Exchange` gives them: blocking (``exchange(x_owned) -> [x_owned; x_halo]``,
differentiable, its backward sending the halo rows' gradient back to their owners), or started
in the background (:meth:`Exchange.start` forward, :meth:`Exchange.start_reverse` for the
gradient) so that a model can compute the edges that need no halo row meanwhile.

Every exchanger implements it and the model calls it by these names:
:class:`~partgnn.distributed.halo_exchange.HaloExchanger` (the ranks of a graph group),
:class:`~partgnn.models.replayed_exchange.ReplayedExchange` (a recomputed forward pass gets the
rows again without communicating), and in one process
:class:`~partgnn.distributed.in_process_exchanges.NoExchange` (a whole graph: no halo rows) and
:class:`~partgnn.distributed.in_process_exchanges.LoopbackExchange` (halo rows copied from owned
ones: the memory planner's probe). The order of the edges
that hides an exchange (interior edges first) is not the exchange's: it is the event's, carried
by the training item (:class:`~partgnn.distributed.interior_first.InteriorFirst`).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from partgnn.distributed.context import DistContext


class ArrivingRows(Protocol):
    """Rows of an exchange started in the background."""

    def wait(self) -> torch.Tensor:
        """Blocks until the rows are here and returns them."""
        ...


@runtime_checkable
class Exchange(Protocol):
    """A rank's halo exchange for one event (see the module docstring).

    Attributes:
        n_owned: Rows this rank owns (the first rows of its local node arrays).
        n_halo: Halo rows it receives (after the owned ones).
        send_index: Local indices of the owned rows it sends ``(rows_sent,)``, in the order the
            peers receive them.
        hides_communication: Whether :meth:`start` is worth using (peers to wait for, and
            the run hides communication behind compute: ``run.hide_communication``).
        context: The ranks that exchange (a model's group-wide statistics reduce over them);
            ``None`` for an exchange within one process.
    """

    @property
    def n_owned(self) -> int: ...

    @property
    def n_halo(self) -> int: ...

    @property
    def send_index(self) -> torch.Tensor: ...

    @property
    def hides_communication(self) -> bool: ...

    @property
    def context(self) -> DistContext | None: ...

    def __call__(self, x_owned: torch.Tensor) -> torch.Tensor:
        """``[x_owned; x_halo]`` ``(n_owned + n_halo, *F)`` from ``x_owned`` ``(n_owned, *F)``
        (a collective of the group: differentiable, its backward returns the halo rows'
        gradient to their owners)."""
        ...

    def start(self, x_owned: torch.Tensor) -> ArrivingRows:
        """Starts the forward exchange of ``x_owned`` ``(n_owned, *F)`` (not differentiable);
        ``wait()`` gives the halo rows ``(n_halo, *F)``."""
        ...

    def start_reverse(self, grad_halo: torch.Tensor) -> ArrivingRows:
        """Starts sending the halo rows' gradient ``(n_halo, *F)`` back to their owners;
        ``wait()`` gives what the peers returned for this rank's sent rows ``(rows_sent, *F)``,
        to be added at ``send_index``."""
        ...
