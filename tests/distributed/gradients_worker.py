"""One rank of the gradient-reduction test: ``python -m tests.distributed.gradients_worker OUT
GROUP_SIZE``.

Each rank backpropagates its own loss through a small model twice: once with
:class:`BucketedGradientReduce` (small buckets, so several are launched during the backward
pass, while halo-exchange-like traffic runs in the graph group) and once with
:func:`all_reduce_gradients` after the pass. It saves both results, and what
:func:`all_reduce_value` agrees when ranks report a stop signal and non-finite values.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from partgnn.distributed.gradients import (
    BucketedGradientReduce,
    GradientCombination,
    all_reduce_gradients,
    all_reduce_value,
)
from partgnn.distributed.process_group import destroy_distributed, init_distributed


class _Model(nn.Module):
    """Layers of different sizes; ``unused`` gets no gradient; the graph group's collective
    runs inside the backward pass (as a halo exchange's reverse does)."""

    def __init__(self) -> None:
        super().__init__()
        self.unused = nn.Linear(4, 4)  # first: in the last bucket, which waits for finish()
        self.layers = nn.Sequential(*(nn.Linear(16, 16) for _ in range(6)), nn.Linear(16, 1))


class _GroupSum(torch.autograd.Function):
    """The identity forward; its backward all-reduces in the graph group."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


GRAPH_SUM = GradientCombination.GRAPH_SUM


def main() -> None:
    out, group_size = Path(sys.argv[1]), int(sys.argv[2])
    context = init_distributed(device="cpu", timeout_s=60, group_size=group_size)
    torch.manual_seed(0)
    model = _Model().double()
    x = torch.randn(32, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(
        context.global_rank + 1))  # fmt: skip
    results = {}
    for name in ("bucketed", "after"):
        model.zero_grad(set_to_none=True)
        reduce = BucketedGradientReduce(model.parameters(), context, combination=GRAPH_SUM,
                                        bucket_bytes=2048)  # fmt: skip
        if name == "bucketed":
            reduce.begin()
        h = x
        for index, layer in enumerate(model.layers):
            h = torch.tanh(layer(h)) if index < len(model.layers) - 1 else layer(h)
            if index == 2:
                h = _GroupSum.apply(h, context.group)
        (h.square().sum() * (context.global_rank + 1)).backward()
        if name == "bucketed":
            results["buckets"] = len(reduce.buckets)
            results["launched_in_backward"] = len(reduce._launched)
            reduce.finish()
        else:
            all_reduce_gradients(model.parameters(), context, combination=GRAPH_SUM)
        reduce.close()
        results[name] = {n: p.grad.clone() for n, p in model.named_parameters()}
    # The step's agreement: rank 1 found its loss not finite, the last rank its gradients;
    # every rank must learn both, with the stop flag and the reduced loss.
    rank, last = context.global_rank, context.global_world_size - 1
    non_finite = torch.tensor([rank == 1, rank == last])
    results["step"] = tuple(all_reduce_value(
        torch.tensor(float(rank)), context, combination=GRAPH_SUM, flag=15 if rank == 0 else 0,
        non_finite=non_finite,
    ))  # fmt: skip
    torch.save(results, out.with_name(f"{out.name}.rank{context.global_rank}"))
    destroy_distributed(context)


if __name__ == "__main__":
    main()
