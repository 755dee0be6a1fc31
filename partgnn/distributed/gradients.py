"""Gradient and loss synchronisation across the ranks of a run, in one all-reduce per group.

With graph parallelism the ranks of one graph-parallel group hold parts of the *same* event:
their losses are parts of one sum (each divided by the event's global normaliser), so their
gradients are **summed** over the group (exact: the full-graph gradient). Graph groups that train
on different events are data-parallel replicas and are **averaged**. Without graph parallelism
(modes full, naive, ddp) every rank is a replica: gradients are averaged over the world.

:func:`all_reduce_gradients` reduces after the backward pass; :class:`BucketedGradientReduce`
reduces during it, bucket by bucket as the gradients become final (as DDP does). Both are a
:class:`GradientReduce` (:class:`GradientReduceAfterBackward` wraps the first), which is what a
training strategy hands the trainer.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any, NamedTuple, Protocol

import torch
import torch.distributed as dist
from torch import nn

from partgnn.distributed.context import DistContext


class GradientCombination(enum.Enum):
    """How the ranks' gradients (and losses) combine into the step's.

    ``GRAPH_SUM``: the ranks of a graph-parallel group hold parts of one event, so their
    contributions are summed over the group (the full-graph gradient), and the groups, which
    train different events, are averaged (halo mode). ``MEAN``: every rank is a replica, the
    gradients are averaged over the world (full, naive, ddp modes).
    """

    GRAPH_SUM = "sum over the graph group, mean over the graph groups"
    MEAN = "mean over every rank"

    def reduce(self, tensor: torch.Tensor, context: DistContext, replicas: int | None) -> None:
        """Combines ``tensor`` over the ranks in place (``replicas``: divide the sum over
        replicas by this many, those that had an event this step, instead of all of them).
        Collective."""
        if self is GradientCombination.GRAPH_SUM:
            if context.group_size > 1:
                dist.all_reduce(tensor, group=context.group)
            self.across_replicas(tensor, context, replicas)
        else:
            dist.all_reduce(tensor)
            tensor /= replicas or context.global_world_size

    def across_replicas(
        self, tensor: torch.Tensor, context: DistContext, replicas: int | None
    ) -> None:
        """The second stage of :data:`GRAPH_SUM`, after the graph group's sum: the mean over
        the graph groups (nothing with one). Collective over the data-parallel group."""
        if context.n_graph_groups > 1:
            dist.all_reduce(tensor, group=context.data_parallel_group)
            tensor /= replicas or context.n_graph_groups


def all_reduce_gradients(
    parameters: Iterable[nn.Parameter],
    context: DistContext,
    *,
    combination: GradientCombination,
    replicas: int | None = None,
) -> None:
    """Synchronises the gradients of ``parameters`` in place (one flat all-reduce per group).

    Args:
        parameters: The model's parameters, in the same order on every rank. A parameter with
            no gradient on this rank (unused by its part) contributes zeros and gets the
            reduced gradient, so every rank takes part in the same collectives.
        context: The run's distributed context.
        combination: How the ranks' gradients combine.
        replicas: Divide the sum over replicas by this (the replicas that had an event this
            step; the others contributed zeros) instead of by all of them.

    .. warning::
        Collective: every rank calls it with the same parameters in the same order.
    """
    parameters = [p for p in parameters if p.requires_grad]
    if context.global_world_size == 1 or not parameters:
        return
    flat = _flatten(parameters)
    combination.reduce(flat, context, replicas)
    _write_back(parameters, flat)


def _flatten(parameters: list[nn.Parameter]) -> torch.Tensor:
    """The parameters' gradients (zeros where there is none) in one flat tensor."""
    return torch.cat(
        [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in parameters]
    )


def _write_back(parameters: list[nn.Parameter], flat: torch.Tensor) -> None:
    offset = 0
    for p in parameters:
        n = p.numel()
        reduced = flat[offset : offset + n].view_as(p)
        if p.grad is None:
            p.grad = reduced.clone()
        else:
            p.grad.copy_(reduced)
        offset += n


#: Gradient bytes per bucket of :class:`BucketedGradientReduce` on gloo (measured on CPUs)...
BUCKET_BYTES = 256 * 1024
#: ...and on NCCL, where an all-reduce of 256 KiB costs its launch latency more than its bytes
#: (4 MiB moves in about the time of that latency within a node; not measured on a GPU yet).
BUCKET_BYTES_CUDA = 4 * 2**20


def bucket_bytes_for(device: torch.device) -> int:
    """The default bucket size for gradients on ``device``."""
    return BUCKET_BYTES_CUDA if device.type == "cuda" else BUCKET_BYTES


class GradientReduce(Protocol):
    """Combines gradients across ranks: :meth:`begin` before the backward pass, :meth:`finish`
    after it."""

    def begin(self) -> None: ...

    def finish(self, *, replicas: int | None = None) -> None: ...


class GradientReduceAfterBackward:
    """All gradients in one all-reduce after the backward pass
    (:func:`all_reduce_gradients`)."""

    def __init__(
        self,
        parameters: list[nn.Parameter],
        context: DistContext,
        combination: GradientCombination,
    ) -> None:
        self.parameters, self.context, self.combination = parameters, context, combination

    def begin(self) -> None:
        """Nothing to arm: the reduction waits for the whole backward pass."""

    def finish(self, *, replicas: int | None = None) -> None:
        all_reduce_gradients(
            self.parameters, self.context, combination=self.combination, replicas=replicas
        )


class BucketedGradientReduce:
    """Reduces gradients during the backward pass: each bucket of parameters is all-reduced in
    the background as soon as all its gradients are final, while the pass goes on.

    Buckets hold the parameters in reverse order (the output layers' gradients are final
    first) and are launched strictly in bucket order, so every rank issues the same
    collectives in the same order, whatever the timing. The reduction runs in the context's
    gradient group (the graph group's ranks again), so it never interleaves with the halo
    exchanges of the same backward pass. The result equals :func:`all_reduce_gradients`. A
    parameter the loss does not use holds its bucket (and the later ones) until :meth:`finish`,
    as in DDP: correct, only later.

    Use: :meth:`begin` before ``loss.backward()``, :meth:`finish` after it.

    Args:
        parameters: The model's parameters, in the same order on every rank.
        context: The run's distributed context.
        combination: How the ranks' gradients combine.
        bucket_bytes: Gradient bytes per bucket (a bucket holds at least one parameter;
            default :func:`bucket_bytes_for` the context's device).
    """

    def __init__(
        self,
        parameters: Iterable[nn.Parameter],
        context: DistContext,
        *,
        combination: GradientCombination,
        bucket_bytes: int | None = None,
    ) -> None:
        if bucket_bytes is None:
            bucket_bytes = bucket_bytes_for(context.device)
        self.parameters = [p for p in parameters if p.requires_grad]
        self.context, self.combination = context, combination
        self.buckets: list[list[nn.Parameter]] = []
        size = bucket_bytes
        for p in reversed(self.parameters):
            if size >= bucket_bytes:
                self.buckets.append([])
                size = 0
            self.buckets[-1].append(p)
            size += p.numel() * p.element_size()
        self._bucket_of = {id(p): i for i, bucket in enumerate(self.buckets) for p in bucket}
        self._active = False
        self._ready: list[set[int]] = []
        self._launched: list[tuple[Any, torch.Tensor]] = []
        self._hooks = [
            p.register_post_accumulate_grad_hook(self._on_gradient) for p in self.parameters
        ]
        if combination is GradientCombination.GRAPH_SUM:
            self._group = context.gradient_group if context.group_size > 1 else None
            self._first_stage = context.group_size > 1
        else:
            self._group, self._first_stage = None, True

    @property
    def needed(self) -> bool:
        return self.context.global_world_size > 1 and bool(self.parameters)

    def begin(self) -> None:
        """Arms the hooks for one backward pass."""
        self._active = self.needed
        self._ready = [set() for _ in self.buckets]
        self._launched = []

    def finish(self, *, replicas: int | None = None) -> None:
        """Launches the buckets still waiting (parameters this rank did not use get zeros),
        waits for all, and writes the reduced gradients back.

        Args:
            replicas: Average over this many replicas (as in :func:`all_reduce_gradients`).

        .. warning::
            Collective: every rank calls it after every backward pass it began.
        """
        if not self._active:
            return
        while len(self._launched) < len(self.buckets):
            self._launch(len(self._launched))
        for bucket, (request, flat) in zip(self.buckets, self._launched, strict=True):
            if request is not None:
                request.wait()
            if self.combination is GradientCombination.GRAPH_SUM:
                self.combination.across_replicas(flat, self.context, replicas)
            else:
                flat /= replicas or self.context.global_world_size
            _write_back(bucket, flat)
        self._active = False
        self._launched = []

    def close(self) -> None:
        """Removes the hooks."""
        for hook in self._hooks:
            hook.remove()
        self._hooks = []

    def _on_gradient(self, parameter: nn.Parameter) -> None:
        if not self._active:
            return
        index = self._bucket_of[id(parameter)]
        self._ready[index].add(id(parameter))
        while len(self._launched) < len(self.buckets):
            next_bucket = len(self._launched)
            if len(self._ready[next_bucket]) < len(self.buckets[next_bucket]):
                break
            self._launch(next_bucket)

    def _launch(self, index: int) -> None:
        flat = _flatten(self.buckets[index])
        request = None
        if self._first_stage:
            request = dist.all_reduce(flat, group=self._group, async_op=True)
        self._launched.append((request, flat))


#: Flags :func:`all_reduce_value` carries are in ``[0, FLAG_LIMIT)`` (signal numbers).
FLAG_LIMIT = 65


class ReducedStep(NamedTuple):
    """What :func:`all_reduce_value` agrees on every rank.

    Attributes:
        value: The reduced scalar (the step's loss).
        flag: The largest flag any rank raised (a stop signal; 0: none).
        non_finite: ``(global rank, "loss" | "gradient")`` of every rank whose
            ``non_finite`` input was raised (empty when all were finite).
    """

    value: float
    flag: int
    non_finite: list[tuple[int, str]]


#: What the two entries of :func:`all_reduce_value`'s ``non_finite`` input say.
NON_FINITE_KINDS: tuple[str, str] = ("loss", "gradient")


def all_reduce_value(
    value: torch.Tensor,
    context: DistContext,
    *,
    combination: GradientCombination,
    replicas: int | None = None,
    flag: int = 0,
    non_finite: torch.Tensor | None = None,
) -> ReducedStep:
    """A scalar reduced like the gradients: the event's sum over its group, the replicas' mean
    (over ``replicas`` of them if given); and, in the same all-reduce, the largest of every
    rank's ``flag`` (a signal any rank may have received) and which ranks found their loss or
    gradients not finite.

    Computed in float64; the flag travels as a one-hot row (a sum whose largest non-zero
    position is the largest flag), ``non_finite`` (this rank's ``[loss, gradient]`` 0/1 flags,
    on the device: no host read) in two entries per global rank. One read of the result on
    the host. Collective, like :func:`all_reduce_gradients`.

    Raises:
        ValueError: If ``flag`` is outside ``[0, FLAG_LIMIT)``.
    """
    if not 0 <= flag < FLAG_LIMIT:
        raise ValueError(f"flag {flag} is outside [0, {FLAG_LIMIT})")
    n_ranks = context.global_world_size
    reduced = torch.zeros(1 + FLAG_LIMIT + 2 * n_ranks, dtype=torch.float64, device=value.device)
    reduced[0] = value.detach().reshape(())
    reduced[1 + flag] = 1.0
    if non_finite is not None:
        slot = 1 + FLAG_LIMIT + 2 * context.global_rank
        reduced[slot : slot + 2] = non_finite.to(torch.float64)
    if n_ranks > 1:
        combination.reduce(reduced, context, replicas)
    total, *rest = reduced.tolist()
    flags, problems = rest[:FLAG_LIMIT], rest[FLAG_LIMIT:]
    found = [
        (rank, NON_FINITE_KINDS[kind])
        for rank in range(n_ranks)
        for kind in range(2)
        if problems[2 * rank + kind] != 0
    ]
    return ReducedStep(total, max(i for i, raised in enumerate(flags) if raised > 0), found)


def max_over_ranks(value: int, context: DistContext) -> int:
    """The largest of every rank's ``value``, on every rank of the job (a flag any rank may
    raise). Collective over the whole job; free with one process."""
    if context.global_world_size == 1:
        return value
    reduced = torch.tensor([value], dtype=torch.int64, device=context.device)
    dist.all_reduce(reduced, op=dist.ReduceOp.MAX)
    return int(reduced.item())
