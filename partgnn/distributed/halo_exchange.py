"""Differentiable halo exchange: fill every rank's halo rows with their owners' current values.

Forward: each rank gathers the rows of its owned nodes that other ranks hold as halo
(``send_index``), sends them, and appends what it receives to its owned rows, giving the local
node matrix ``[owned; halo]`` in the order of the rank's :class:`~partgnn.partition.halo_plan.
HaloPlan`. Backward: the reverse exchange (send and receive counts swapped) returns the halo
gradients to the owners, which sum them into their rows. With it, every owned node sees current
states of all its neighbours, so a partitioned forward and the summed gradients equal the
single-process full-graph computation.

Two transports: ``all_to_all`` (one ``all_to_all_single`` with split sizes; every rank of the
group takes part) and ``p2p`` (batched ``isend``/``irecv`` with the neighbour ranks only: a
detector sector has few neighbours, and all-to-all latency grows with P).

.. warning::
    Every exchange is a synchronisation point: every rank of the group must call it, in the same
    order, with its own plan — also ranks with no owned nodes or nothing to send. Its backward is
    one too: every exchange output must contribute to every rank's loss (an empty contribution
    is fine: autograd still runs the backward), so that all ranks run the reverse exchanges in
    the same order.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
import torch.distributed as dist

from partgnn.distributed.communication_counter import CommunicationCounter
from partgnn.distributed.context import DistContext
from partgnn.distributed.exchange_plan import (
    ExchangePlan,
    Transport,
    resolve_transport,
)
from partgnn.partition.halo_plan import HaloPlan


def halo_exchange(
    x_owned: torch.Tensor,
    plan: ExchangePlan,
    context: DistContext,
    *,
    transport: Transport = "auto",
    counter: CommunicationCounter | None = None,
) -> torch.Tensor:
    """Returns ``[x_owned; x_halo]``: the owned rows followed by the halo rows from their owners.

    Differentiable: the gradient of the halo rows flows back to the ranks that own them.

    Args:
        x_owned: Rows of the owned nodes, shape ``(n_owned, *F)``.
        plan: This rank's exchange lists (:meth:`ExchangePlan.from_halo_plan`).
        context: Rank and graph-parallel group.
        transport: ``"all_to_all"``, ``"p2p"`` or ``"auto"``.
        counter: Accumulates the bytes moved, forward and backward.

    Returns:
        Local rows, shape ``(n_owned + n_halo, *F)``.

    .. warning::
        A synchronisation point: every rank of ``context.group`` must call it in the same order
        (see the module docstring).
    """
    _check_owned_rows(x_owned, plan)
    if plan.n_parts != context.group_size:
        raise ValueError(
            f"halo_exchange: plan is for {plan.n_parts} ranks, the group has {context.group_size}"
        )
    if context.group_size == 1:
        return x_owned
    return _HaloExchange.apply(
        x_owned, plan, context, resolve_transport(transport, context.group_size), counter
    )


class HaloExchanger:
    """A rank's halo exchange for one event among the ranks of its graph group: the
    :class:`~partgnn.distributed.exchange.Exchange` contract.

    Models take one of these, so the same model code runs on a whole graph (``P = 1``: the
    identity) and on a partition. With ``hide_communication``, a model that can (the
    Interaction Network) uses :meth:`start` and :meth:`start_reverse` instead and computes the
    edges that need no halo row while the rows are in flight (in the event's interior-first
    order, which the training item carries:
    :class:`~partgnn.distributed.interior_first.InteriorFirst`).
    """

    def __init__(
        self,
        plan: ExchangePlan,
        context: DistContext,
        *,
        transport: Transport = "auto",
        counter: CommunicationCounter | None = None,
        hide_communication: bool = False,
    ) -> None:
        self.plan = plan
        self._context = context
        self.transport = transport
        self.counter = counter
        self._hide_communication = hide_communication

    @classmethod
    def for_plan(
        cls,
        plan: HaloPlan,
        context: DistContext,
        *,
        transport: Transport = "auto",
        counter: CommunicationCounter | None = None,
        hide_communication: bool = False,
    ) -> HaloExchanger:
        """The exchange of a rank's :class:`~partgnn.partition.halo_plan.HaloPlan`, on the
        rank's device (the one way the package builds an exchanger for an event)."""
        return cls(
            ExchangePlan.from_halo_plan(plan, context.device),
            context,
            transport=transport,
            counter=counter,
            hide_communication=hide_communication,
        )

    def on_plan(self, plan: ExchangePlan) -> HaloExchanger:
        """This exchanger (its group, transport, counter and hiding) on another plan of the
        same event (e.g. its rows padded)."""
        return HaloExchanger(
            plan,
            self._context,
            transport=self.transport,
            counter=self.counter,
            hide_communication=self._hide_communication,
        )

    @property
    def context(self) -> DistContext:
        """The ranks that exchange (this rank's graph group)."""
        return self._context

    @property
    def n_owned(self) -> int:
        return self.plan.n_owned

    @property
    def n_halo(self) -> int:
        return self.plan.n_halo

    @property
    def send_index(self) -> torch.Tensor:
        """Local indices of the owned rows sent, ``(rows_sent,)``."""
        return self.plan.send_index

    def __call__(self, x_owned: torch.Tensor) -> torch.Tensor:
        return halo_exchange(
            x_owned, self.plan, self.context, transport=self.transport, counter=self.counter
        )

    @property
    def hides_communication(self) -> bool:
        """Whether :meth:`start` is worth using: there are peers (``P > 1``) and the
        exchanger was made to hide communication (``run.hide_communication``)."""
        return self._hide_communication and self.context.group_size > 1

    def start(self, x_owned: torch.Tensor) -> PendingExchange:
        """Starts the forward exchange of ``x_owned`` (not differentiable: the caller runs
        :meth:`start_reverse` in its backward pass).

        Args:
            x_owned: Rows of the owned nodes ``(n_owned, *F)``.

        Returns:
            The exchange in flight; its :meth:`~PendingExchange.wait` gives the halo rows
            ``(n_halo, *F)``.
        """
        plan = self.plan
        _check_owned_rows(x_owned, plan)
        send = x_owned.index_select(0, plan.send_index)
        received = x_owned.new_empty((plan.n_halo, *x_owned.shape[1:]))
        return self._start(send, received, plan.send_counts, plan.recv_counts, "forward")

    def start_reverse(self, grad_halo: torch.Tensor) -> PendingExchange:
        """Starts the reverse exchange: the halo rows' gradient ``(n_halo, *F)`` goes back to
        the owners; :meth:`~PendingExchange.wait` gives what the peers returned for this
        rank's sent rows, ``(rows_sent, *F)``, to be added at ``plan.send_index``."""
        plan = self.plan
        grad_sent = grad_halo.new_empty((plan.rows_sent, *grad_halo.shape[1:]))
        return self._start(
            grad_halo.contiguous(), grad_sent, plan.recv_counts, plan.send_counts, "backward"
        )

    def _start(
        self,
        send: torch.Tensor,
        receive: torch.Tensor,
        send_counts: Sequence[int],
        recv_counts: Sequence[int],
        direction: str,
    ) -> PendingExchange:
        transport = resolve_transport(self.transport, self.context.group_size)
        requests = _exchange(send, receive, send_counts, recv_counts, self.context, transport,
                             async_op=True)  # fmt: skip
        if self.counter is not None:
            self.counter.record(direction, _nbytes(send), _nbytes(receive))
        return PendingExchange(requests, send, receive, self.counter)


class PendingExchange:
    """An exchange in flight. Holds its buffers until :meth:`wait` returns the received rows.

    .. warning::
        Every rank that started the exchange must wait for it.
    """

    def __init__(
        self,
        requests: list,
        send: torch.Tensor,
        receive: torch.Tensor,
        counter: CommunicationCounter | None = None,
    ) -> None:
        self._requests = requests
        self._send: torch.Tensor | None = send
        self._receive = receive
        self._counter = counter

    def wait(self) -> torch.Tensor:
        """Blocks until the exchange is done (on CUDA: orders the current stream after it)."""
        started = time.perf_counter()
        for request in self._requests:
            request.wait()
        if self._counter is not None and self._requests:
            self._counter.blocked_seconds += time.perf_counter() - started
        self._requests, self._send = [], None
        return self._receive


class _HaloExchange(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_owned, plan, context, transport, counter):
        send = x_owned.index_select(0, plan.send_index)
        # The halo rows are received straight into the output, after a copy of the owned rows.
        x_local = x_owned.new_empty((plan.n_owned + plan.n_halo, *x_owned.shape[1:]))
        x_local[: plan.n_owned] = x_owned
        received = x_local[plan.n_owned :]
        started = time.perf_counter()
        _exchange(send, received, plan.send_counts, plan.recv_counts, context, transport)
        if counter is not None:
            counter.record("forward", _nbytes(send), _nbytes(received))
            counter.blocked_seconds += time.perf_counter() - started
        ctx.plan, ctx.context, ctx.transport, ctx.counter = plan, context, transport, counter
        return x_local

    @staticmethod
    def backward(ctx, grad_local):
        plan = ctx.plan
        grad_halo = grad_local[plan.n_owned :].contiguous()
        grad_sent = grad_local.new_empty((plan.rows_sent, *grad_local.shape[1:]))
        # The reverse exchange: what was received is sent back, into the rows that were sent.
        started = time.perf_counter()
        _exchange(
            grad_halo, grad_sent, plan.recv_counts, plan.send_counts, ctx.context, ctx.transport
        )
        if ctx.counter is not None:
            ctx.counter.record("backward", _nbytes(grad_halo), _nbytes(grad_sent))
            ctx.counter.blocked_seconds += time.perf_counter() - started
        # One new tensor: the owned rows' gradient plus what the peers returned for them.
        grad_owned = grad_local[: plan.n_owned].index_add(0, plan.send_index, grad_sent)
        return grad_owned, None, None, None, None


def _exchange(
    send: torch.Tensor,
    receive: torch.Tensor,
    send_counts: Sequence[int],
    recv_counts: Sequence[int],
    context: DistContext,
    transport: str,
    *,
    async_op: bool = False,
) -> list:
    """Sends ``send`` split by ``send_counts`` and fills ``receive`` split by ``recv_counts``.

    On a context with ``host_staging`` (ranks computing on a GPU over gloo, whose
    point-to-point calls take host memory only) the rows go through host copies: ``send`` is
    copied to the host, the exchange fills a host buffer, and waiting copies it into
    ``receive``.

    Returns:
        With ``async_op``, the requests to wait for (else none: the exchange is done).
    """
    if context.host_staging:
        host_receive = torch.empty(receive.shape, dtype=receive.dtype, device="cpu")
        requests = _exchange_rows(send.cpu(), host_receive, send_counts, recv_counts, context,
                                  transport, async_op=True)  # fmt: skip
        staged = StagedReceive(requests, host_receive, receive)
        if async_op:
            return [staged]
        staged.wait()
        return []
    return _exchange_rows(send, receive, send_counts, recv_counts, context, transport,
                          async_op=async_op)  # fmt: skip


class StagedReceive:
    """An exchange through host memory in flight: waiting for it copies the received host
    rows into the device tensor they belong to."""

    def __init__(self, requests: list, host_receive: torch.Tensor, receive: torch.Tensor) -> None:
        self._requests = requests
        self._host_receive = host_receive
        self._receive = receive

    def wait(self) -> None:
        for request in self._requests:
            request.wait()
        self._receive.copy_(self._host_receive)


def _exchange_rows(
    send: torch.Tensor,
    receive: torch.Tensor,
    send_counts: Sequence[int],
    recv_counts: Sequence[int],
    context: DistContext,
    transport: str,
    *,
    async_op: bool,
) -> list:
    """:func:`_exchange` on tensors the backend can move."""
    if transport == "all_to_all":
        request = dist.all_to_all_single(
            receive,
            send,
            output_split_sizes=list(recv_counts),
            input_split_sizes=list(send_counts),
            group=context.group,
            async_op=async_op,
        )
        return [request] if async_op else []
    ops = []
    send_chunks = send.split(list(send_counts))
    recv_chunks = receive.split(list(recv_counts))
    for peer, (n_send, n_recv) in enumerate(zip(send_counts, recv_counts, strict=True)):
        global_peer = _global_rank(context, peer)
        # Receives are posted before sends; gloo pairs them by (peer, tag).
        if n_recv:
            ops.append(dist.P2POp(dist.irecv, recv_chunks[peer], global_peer, context.group))
        if n_send:
            ops.append(dist.P2POp(dist.isend, send_chunks[peer], global_peer, context.group))
    # Waiting on every request (not only the last) works around gloo's asynchronous
    # isend/irecv bug (pytorch issue 30723).
    requests = dist.batch_isend_irecv(ops) if ops else []
    if async_op:
        return requests
    for request in requests:
        request.wait()
    return []


def _check_owned_rows(x_owned: torch.Tensor, plan: ExchangePlan) -> None:
    if x_owned.shape[0] != plan.n_owned:
        raise ValueError(
            f"halo_exchange: x_owned has {x_owned.shape[0]} rows, the plan owns {plan.n_owned}"
        )


def _global_rank(context: DistContext, group_rank: int) -> int:
    if context.group is None:
        return group_rank
    return dist.get_global_rank(context.group, group_rank)


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()
