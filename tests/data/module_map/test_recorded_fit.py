"""Tests of partgnn.data.module_map.recorded_fit: a card's recorded ``fit-module-map`` options read
into the library's settings, the command's own options with its defaults."""

from __future__ import annotations

import argparse

import pytest

from partgnn.cli.main import build_parser
from partgnn.data.module_map.doublets import SimulatedRun
from partgnn.data.module_map.recorded_fit import RECORDED_OPTIONS, RecordedMapFit
from partgnn.errors import InputError


def _fit_module_map_parser() -> argparse.ArgumentParser:
    subparsers = next(
        action for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    )  # fmt: skip
    return subparsers.choices["fit-module-map"]


def test_the_recorded_options_are_the_commands_with_its_defaults():
    parser = _fit_module_map_parser()
    actions = {option: action for action in parser._actions for option in action.option_strings}
    for option, default in RECORDED_OPTIONS.items():
        assert option in actions, f"fit-module-map has no {option}"
        assert actions[option].default == default, option


def test_the_shipped_cards_fit_reads_into_the_library_settings():
    arguments = ["--simulate", "41:100000:2000", "--simulate", "42:200000:2000", "--pileup",
                 "200", "--pt-min", "1.0", "--floor", "0.5", "0.2", "0.2", "0.5", "--triplets",
                 "--triplet-floor", "0.5", "--window-precision", "float32", "--module-planes",
                 "--field-profile", "--secondaries", "--max-vertex-radius", "1"]  # fmt: skip
    recorded = RecordedMapFit.parse(arguments, where="card.yaml")
    assert recorded.arguments == tuple(arguments)
    assert recorded.simulated.runs == [
        SimulatedRun(41, 100000, 2000),
        SimulatedRun(42, 200000, 2000),
    ]
    assert recorded.simulated.pileup == 200.0 and recorded.simulated.workers == 1
    fit = recorded.fit
    assert (fit.pt_min, fit.triplets, fit.triplet_floor, fit.precision) == (
        1.0,
        True,
        0.5,
        "float32",
    )
    assert list(fit.floor) == [0.5, 0.2, 0.2, 0.5] and fit.max_vertex_radius == 1.0
    assert recorded.geometry is None


@pytest.mark.parametrize(
    "arguments, says",
    [
        (["--simulate", "1:0:2", "--no-such-option"], "not its options"),
        (["--simulate", "1:0:2", "--window", "wide"], "not its options"),
        (["--simulate", "1:0:2", "--pileup", "-1"], "a negative value"),
        (["--simulate", "1:0"], "SEED:FIRST_EVENT_ID:EVENTS"),
    ],
)
def test_options_the_command_refuses_are_one_line(arguments, says):
    with pytest.raises(InputError, match=says) as refused:
        RecordedMapFit.parse(arguments, where="card.yaml")
    assert "\n" not in str(refused.value)
