"""Tests of partgnn.data.simulation.simulated_file: a simulated events file's provenance names its
simulation, and only that simulation's file is replaced without ``overwrite``."""

import pytest

from partgnn.data.detector.geometry import default_geometry
from partgnn.data.files.storage import EventFile
from partgnn.data.simulation.simulated_file import (
    check_replaceable,
    simulation_provenance,
    write_simulated_events,
)
from partgnn.data.simulation.simulation_config import SimulationConfig
from partgnn.errors import InputError

CONFIG = SimulationConfig(pileup=1, module_planes=False, field_profile=False, secondaries=False)


def test_the_digest_names_the_simulation_and_its_events():
    geometry = default_geometry()
    digest = {
        key: simulation_provenance(geometry, CONFIG, **kwargs)["simulation_sha256"]
        for key, kwargs in {
            "a": {"seed": 1, "events": 2},
            "a again": {"seed": 1, "events": 2},
            "other seed": {"seed": 2, "events": 2},
            "more events": {"seed": 1, "events": 3},
            "other ids": {"seed": 1, "events": 2, "first_event_id": 5},
        }.items()
    }
    assert digest["a"] == digest["a again"]
    assert len({digest[k] for k in ("a", "other seed", "more events", "other ids")}) == 4


def test_only_the_same_simulation_is_replaced_without_overwrite(tmp_path):
    geometry, out = default_geometry(), tmp_path / "events.h5"
    assert write_simulated_events(out, geometry, CONFIG, events=2, seed=1) == 2
    with EventFile(out) as events:
        digest = events.attrs["simulation_sha256"]
    check_replaceable(out, digest)  # the same events again: allowed
    assert write_simulated_events(out, geometry, CONFIG, events=2, seed=1) == 2
    with pytest.raises(InputError, match="an events file of another simulation"):
        write_simulated_events(out, geometry, CONFIG, events=2, seed=2)
    other = tmp_path / "notes.txt"
    other.write_text("mine")
    with pytest.raises(InputError, match="not a partgnn events file"):
        check_replaceable(other, digest)
    assert other.read_text() == "mine"
    assert write_simulated_events(out, geometry, CONFIG, events=1, seed=2, overwrite=True) == 1
