"""tools/studies/bench_field.py measures the field a simulation was made in: 2 T and no radial field
for the uniform one, the profile for a profiled one (issue 50: the estimator the shipped
profile was measured with on the real sample)."""

from __future__ import annotations

import runpy

import numpy as np
import pytest

from partgnn.data.detector.geometry import default_geometry
from partgnn.data.simulation.simulate import SimulationConfig, simulate_event
from tests.distributed.launch import REPOSITORY

GEOMETRY = default_geometry()


@pytest.fixture(scope="module")
def tool() -> dict:
    """The tool's functions (its folder importable while it loads, as when run)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(REPOSITORY / "tools"))
        return runpy.run_path(
            str(REPOSITORY / "tools" / "studies" / "bench_field.py"), run_name="tool"
        )


@pytest.mark.parametrize("profiled", [False, True])
def test_the_field_of_a_simulation_is_measured_back(tool, profiled):
    # The uniform or the profiled field alone: what the estimator was measured on.
    config = SimulationConfig(
        pileup=20, field_profile=profiled, module_planes=False, secondaries=False
    )
    event = simulate_event(GEOMETRY, config, event_id=1, seed=1)
    steps = tool["particle_steps"](event, GEOMETRY, 0.3)
    for low, high in ((0, 400), (1000, 1400), (1600, 2000)):
        band = (np.abs(steps["z"]) >= low) & (np.abs(steps["z"]) < high)
        br, bz = tool["solve_field"](steps, band)
        expected = GEOMETRY.field_profile.at(np.array([(low + high) / 2]))[0] if profiled else 2.0
        assert bz == pytest.approx(expected, abs=0.12), (low, high)
        assert abs(br) < 0.03
