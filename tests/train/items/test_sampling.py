"""epoch_steps: every training event once per epoch whatever the events per step, disjoint
events within a step, reproducible from (seed, epoch); size buckets keep a step's events of
similar size."""

from __future__ import annotations

from itertools import pairwise

import pytest
import torch

from partgnn.train.items.sampling import epoch_steps, size_buckets

EVENTS = list(range(10, 27))  # 17 training events
SIZES = torch.randint(100_000, 200_000, (17,), generator=torch.Generator().manual_seed(5)).tolist()


@pytest.mark.parametrize("sampling", ["random", "size_buckets"])
@pytest.mark.parametrize("events_per_step", [1, 2, 3, 4, 17, 20])
def test_every_event_once_per_epoch_in_steps_of_at_most_g(sampling, events_per_step):
    for epoch in range(3):
        steps = epoch_steps(
            EVENTS, events_per_step, seed=1, epoch=epoch, sampling=sampling, sizes=SIZES
        )
        used = [event for step in steps for event in step]
        assert sorted(used) == EVENTS  # each event once: none skipped, none repeated
        assert all(1 <= len(step) <= events_per_step for step in steps)
        assert all(len(set(step)) == len(step) for step in steps)  # groups: disjoint events
        short = [step for step in steps if len(step) < events_per_step]
        assert len(short) == (1 if len(EVENTS) % events_per_step else 0)


@pytest.mark.parametrize("sampling", ["random", "size_buckets"])
def test_the_order_follows_seed_and_epoch(sampling):
    def steps(seed, epoch):
        return epoch_steps(EVENTS, 3, seed=seed, epoch=epoch, sampling=sampling, sizes=SIZES)

    assert steps(1, 0) == steps(1, 0)
    assert steps(1, 0) != steps(1, 1)
    assert steps(1, 0) != steps(2, 0)
    # The step count is the same every epoch (the trainer's schedule relies on it).
    assert len({len(steps(1, epoch)) for epoch in range(5)}) == 1


def test_random_order_is_the_seeded_permutation_cut_into_steps():
    """The order runs before size buckets existed used: their checkpoints resume the same."""
    generator = torch.Generator().manual_seed(4 * 100_003 + 2)
    order = [EVENTS[i] for i in torch.randperm(len(EVENTS), generator=generator).tolist()]
    steps = epoch_steps(EVENTS, 4, seed=4, epoch=2)
    assert [event for step in steps for event in step] == order
    assert [len(step) for step in steps] == [4, 4, 4, 4, 1]


def test_a_size_bucketed_step_holds_events_of_one_bucket():
    assert [len(bucket) for bucket in size_buckets(EVENTS, SIZES, 4)] == [4, 4, 5, 4]
    # Buckets of whole steps (3 events each) but the last, which holds the largest events.
    assert [len(bucket) for bucket in size_buckets(EVENTS, SIZES, 4, multiple=3)] == [6, 3, 3, 5]
    buckets = size_buckets(EVENTS, SIZES, 4, multiple=2)
    assert [len(bucket) for bucket in buckets] == [4, 4, 6, 3]
    size = dict(zip(EVENTS, SIZES, strict=True))
    for low, high in pairwise(buckets):
        assert max(size[e] for e in low) <= min(size[e] for e in high)
    bucket_of = {event: b for b, bucket in enumerate(buckets) for event in bucket}
    for epoch in range(3):
        steps = epoch_steps(
            EVENTS, 2, seed=0, epoch=epoch, sampling="size_buckets", sizes=SIZES, n_buckets=4
        )
        assert all(len({bucket_of[event] for event in step}) == 1 for step in steps)


def test_bad_arguments_are_one_line_errors():
    with pytest.raises(ValueError, match="unknown sampling"):
        epoch_steps(EVENTS, 2, seed=0, epoch=0, sampling="largest_first")
    with pytest.raises(ValueError, match="one size per event"):
        epoch_steps(EVENTS, 2, seed=0, epoch=0, sampling="size_buckets", sizes=[1, 2])
    with pytest.raises(ValueError, match=">= 1"):
        epoch_steps(EVENTS, 0, seed=0, epoch=0)
