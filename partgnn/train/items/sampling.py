"""Which training events each optimizer step of an epoch trains on.

A step trains up to ``events_per_step`` events at once (one per graph group in halo mode, one per
rank in ddp mode). Every training event is used exactly once per epoch: when the events do not
fill the last step (or the last step of a size bucket), that step has fewer events, and the
trainer averages the gradient over the events the step has (the groups without one contribute
nothing).

Two orders, both reproducible from ``(seed, epoch)`` and the same on every rank:

- ``random``: a permutation of the events, cut into steps.
- ``size_buckets``: events sorted by graph size (edges) and split into ``n_buckets`` buckets of
  near-equal count, each a multiple of ``events_per_step`` but the last; each step's events
  come from one bucket (so the groups of a step get events of similar size and wait less for
  each other at the gradient all-reduce); the buckets' steps are shuffled together.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import torch

SAMPLINGS = ("random", "size_buckets")


def epoch_steps(
    events: Sequence[int],
    events_per_step: int,
    *,
    seed: int,
    epoch: int,
    sampling: str = "random",
    sizes: Sequence[int] | None = None,
    n_buckets: int = 4,
) -> list[list[int]]:
    """The steps of one epoch, each a list of event indices.

    Args:
        events: The training events' indices.
        events_per_step: Most events per step (the number of graph groups or replicas).
        seed: The run's seed.
        epoch: The epoch (orders differ between epochs).
        sampling: ``random`` or ``size_buckets`` (see the module docstring).
        sizes: With ``size_buckets``: each event's graph size (edges), in the order of
            ``events``.
        n_buckets: With ``size_buckets``: how many size buckets.

    Returns:
        Steps in training order; together they hold every event once. Every step has
        ``events_per_step`` events but one when that does not divide the events (``random``:
        the last step; ``size_buckets``: one of the largest events' bucket).

    Raises:
        ValueError: On an unknown sampling, no sizes for ``size_buckets``, or counts < 1.
    """
    if sampling not in SAMPLINGS:
        raise ValueError(f"unknown sampling {sampling!r} (choose {', '.join(SAMPLINGS)})")
    if events_per_step < 1 or n_buckets < 1:
        raise ValueError("events_per_step and n_buckets must be >= 1")
    generator = torch.Generator().manual_seed(seed * 100_003 + epoch)
    if sampling == "random":
        order = [events[i] for i in torch.randperm(len(events), generator=generator).tolist()]
        return _cut(order, events_per_step)
    if sizes is None or len(sizes) != len(events):
        raise ValueError("size_buckets sampling needs one size per event")
    steps = []
    for bucket in size_buckets(events, sizes, n_buckets, multiple=events_per_step):
        permutation = torch.randperm(len(bucket), generator=generator).tolist()
        steps += _cut([bucket[i] for i in permutation], events_per_step)
    return [steps[i] for i in torch.randperm(len(steps), generator=generator).tolist()]


@dataclass(frozen=True)
class EpochPlan:
    """A run's epochs: the steps of each (:func:`epoch_steps`), and how many steps the run takes.

    Attributes:
        events: The training events' indices.
        events_per_step: Most events per step.
        seed: The run's seed.
        epochs: Epochs to train.
        max_steps: At most this many steps in all (``None``: the epochs').
        sampling: ``random`` or ``size_buckets``.
        sizes: With ``size_buckets``: each event's graph size (edges), as ``events``.
        n_buckets: With ``size_buckets``: how many size buckets.
    """

    events: Sequence[int]
    events_per_step: int
    seed: int
    epochs: int
    max_steps: int | None = None
    sampling: str = "random"
    sizes: Sequence[int] | None = None
    n_buckets: int = 4

    def steps(self, epoch: int) -> list[list[int]]:
        """The events of each step of ``epoch``."""
        return epoch_steps(
            self.events, self.events_per_step, seed=self.seed, epoch=epoch,
            sampling=self.sampling, sizes=self.sizes, n_buckets=self.n_buckets,
        )  # fmt: skip

    @functools.cached_property
    def steps_per_epoch(self) -> int:
        """Steps in every epoch (the same in each: only their order differs; counted once)."""
        return len(self.steps(0))

    @property
    def total_steps(self) -> int:
        """Steps the run takes: the epochs', or ``max_steps`` if fewer."""
        total = self.epochs * self.steps_per_epoch
        return total if self.max_steps is None else min(total, self.max_steps)


def size_buckets(
    events: Sequence[int], sizes: Sequence[int], n_buckets: int, *, multiple: int = 1
) -> list[list[int]]:
    """``events`` sorted by size (ties by event index) and cut into ``n_buckets`` buckets of
    near-equal count, every bucket but the last a multiple of ``multiple`` events (fewer
    buckets when there are too few events; none empty)."""
    ordered = [event for _, event in sorted(zip(sizes, events, strict=True))]
    n_units = -(-len(ordered) // multiple)  # whole steps, the last one maybe short
    n_buckets = min(n_buckets, n_units)
    bounds = [min(round(b * n_units / n_buckets) * multiple, len(ordered))
              for b in range(n_buckets + 1)]  # fmt: skip
    return [ordered[a:b] for a, b in pairwise(bounds) if b > a]


def _cut(order: list[int], size: int) -> list[list[int]]:
    return [order[k : k + size] for k in range(0, len(order), size)]
