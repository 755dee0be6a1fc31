"""The learning-rate schedule is a pure function of the step."""

from __future__ import annotations

import itertools
import math
import re

import pytest

from partgnn.train.config.sections import OptimConfig
from partgnn.train.schedule import learning_rate_factor, lr_scale, schedule_factor


@pytest.mark.parametrize(("scaling", "factor"), [("none", 1.0), ("linear", 4.0), ("sqrt", 2.0)])
def test_the_scale_follows_the_events_per_step(scaling, factor):
    assert lr_scale(scaling, 4) == factor
    assert lr_scale(scaling, 1) == 1.0


def test_warm_up_is_linear_then_cosine_to_zero():
    factors = [schedule_factor(s, warmup_steps=4, schedule="cosine", total_steps=12)
               for s in range(12)]  # fmt: skip
    assert factors[:4] == [0.25, 0.5, 0.75, 1.0]
    assert factors[4] == 1.0 and factors[8] == pytest.approx(0.5)
    assert all(a > b for a, b in itertools.pairwise(factors[4:]))
    assert schedule_factor(12, warmup_steps=4, schedule="cosine", total_steps=12) == 0.0
    assert schedule_factor(99, warmup_steps=4, schedule="cosine", total_steps=12) == 0.0


def test_constant_after_warm_up_and_no_warm_up():
    assert schedule_factor(0, warmup_steps=2, schedule="constant", total_steps=10) == 0.5
    assert schedule_factor(7, warmup_steps=2, schedule="constant", total_steps=10) == 1.0
    assert schedule_factor(0, warmup_steps=0, schedule="cosine", total_steps=10) == 1.0
    half = schedule_factor(5, warmup_steps=0, schedule="cosine", total_steps=10)
    assert half == pytest.approx(0.5 * (1 + math.cos(math.pi / 2)))


def test_the_factor_is_the_scale_times_the_schedule_and_saves_no_state():
    optim = OptimConfig(warmup_steps=3, lr_scaling="sqrt")
    factor = learning_rate_factor(optim, total_steps=20, events_per_step=9)
    for step in range(20):
        expected = 3.0 * schedule_factor(step, warmup_steps=3, schedule="cosine", total_steps=20)
        assert factor(step) == expected
    assert factor(5) == factor(5)  # the same answer every time: no state


def test_step_decays_every_n_steps_from_the_first_with_the_warm_up_on_top():
    """acorn's default: StepLR(step_size=patience, gamma=factor), its warm-up scaling it."""
    factors = [schedule_factor(s, warmup_steps=2, schedule="step", total_steps=12,
                               decay_steps=3, decay_factor=0.5) for s in range(8)]  # fmt: skip
    assert factors == [0.5, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25]


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("optim.decay_steps=0", "optim.decay_steps must be >= 1 with optim.schedule step"),
        ("optim.decay_factor=0", "optim.decay_factor must be in (0, 1]"),
    ],
)
def test_a_step_schedule_needs_its_decay(override: str, said: str):
    from partgnn.errors import InputError
    from partgnn.train.config.config_file import load_config

    with pytest.raises(InputError, match=re.escape(said)):
        load_config("halo", ["optim.schedule=step", "optim.decay_steps=2", override])
    config = load_config("halo", ["optim.schedule=step", "optim.decay_steps=5"])
    assert config.optim.decay_steps == 5 and config.optim.decay_factor == 0.9
