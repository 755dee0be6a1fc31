"""Gradient and loss synchronisation across the ranks of a run, in one all-reduce per group.

With graph parallelism the ranks of one graph-parallel group hold parts of the *same* event:
their losses are parts of one sum (each divided by the event's global normaliser), so their
gradients are **summed** over the group (exact: the full-graph gradient). Graph groups that train
on different events are data-parallel replicas and are **averaged**. Without graph parallelism
(modes full, naive, ddp) every rank is a replica: gradients are averaged over the world.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.distributed as dist
from torch import nn

from partgnn.distributed.context import DistContext


def all_reduce_gradients(
    parameters: Iterable[nn.Parameter], context: DistContext, *, graph_parallel: bool
) -> None:
    """Synchronises the gradients of ``parameters`` in place (one flat all-reduce per group).

    Args:
        parameters: The model's parameters, in the same order on every rank. A parameter with
            no gradient on this rank (unused by its part) contributes zeros and gets the
            reduced gradient, so every rank takes part in the same collectives.
        context: The run's distributed context.
        graph_parallel: Sum over the graph-parallel group and average over its replicas
            (halo mode); else average over the whole world.

    .. warning::
        Collective: every rank calls it with the same parameters in the same order.
    """
    parameters = [p for p in parameters if p.requires_grad]
    if context.global_world_size == 1 or not parameters:
        return
    flat = torch.cat(
        [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in parameters]
    )
    _reduce(flat, context, graph_parallel=graph_parallel)
    offset = 0
    for p in parameters:
        n = p.numel()
        reduced = flat[offset : offset + n].view_as(p)
        if p.grad is None:
            p.grad = reduced.clone()
        else:
            p.grad.copy_(reduced)
        offset += n


def all_reduce_value(value: torch.Tensor, context: DistContext, *, graph_parallel: bool) -> float:
    """A scalar reduced like the gradients: the event's sum over its group, the replicas' mean.

    Computed in float64. Collective, like :func:`all_reduce_gradients`.
    """
    if context.global_world_size == 1:
        return float(value)
    reduced = value.detach().to(torch.float64).reshape(1)
    _reduce(reduced, context, graph_parallel=graph_parallel)
    return float(reduced)


def max_over_ranks(value: int, context: DistContext) -> int:
    """The largest of every rank's ``value``, on every rank of the job (a flag any rank may
    raise). Collective over the whole job; free with one process."""
    if context.global_world_size == 1:
        return value
    reduced = torch.tensor([value], dtype=torch.int64, device=context.device)
    dist.all_reduce(reduced, op=dist.ReduceOp.MAX)
    return int(reduced.item())


def _reduce(tensor: torch.Tensor, context: DistContext, *, graph_parallel: bool) -> None:
    if graph_parallel:
        if context.world_size > 1:
            dist.all_reduce(tensor, group=context.group)
        if context.n_graph_groups > 1:
            dist.all_reduce(tensor, group=context.data_parallel_group)
            tensor /= context.n_graph_groups
    else:
        dist.all_reduce(tensor)
        tensor /= context.global_world_size
