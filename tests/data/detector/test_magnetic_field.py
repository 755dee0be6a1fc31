"""The field profile along the beam: read from the geometry, interpolated, refused when bad; and
tracks bend in it (issue 50)."""

from __future__ import annotations

import numpy as np
import pytest

from partgnn.data.detector.geometry import DetectorGeometry, default_geometry
from partgnn.data.detector.magnetic_field import FieldProfile
from partgnn.data.simulation.particles import PION
from partgnn.data.simulation.propagation import propagate
from partgnn.data.simulation.simulate import SimulationConfig, simulate_event
from partgnn.errors import InputError

GEOMETRY = default_geometry()


def test_the_shipped_geometry_holds_the_measured_profile():
    profile = GEOMETRY.field_profile
    assert profile is not None
    assert profile.at(np.array([0.0, -50.0, 50.0])) == pytest.approx([1.997] * 3)
    assert profile.at(np.array([1000.0]))[0] == pytest.approx((1.921 + 1.880) / 2)
    assert profile.at(np.array([-9000.0]))[0] == pytest.approx(profile.bz[-1])


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("[1, 2]", "mapping with abs_z and bz"),
        ("{abs_z: [0, 1], bz: [2]}", "one finite bz per abs_z"),
        ("{abs_z: [10, 20], bz: [2, 1]}", "abs_z must start at 0"),
        ("{abs_z: [0, 20, 10], bz: [2, 1, 1]}", "increase"),
        ("{abs_z: [0, x], bz: [2, 1]}", "lists of numbers"),
    ],
)
def test_a_bad_profile_is_one_line_naming_the_file(tmp_path, spec, message):
    path = tmp_path / "geometry.yaml"
    path.write_text(
        "volumes:\n  - {volume_id: 8, kind: barrel, layer_ids: [2], positions: [32], "
        f"half_length: 100, material: 0.02, resolution: [0.01, 0.01]}}\nb_field_profile: {spec}\n"
    )
    with pytest.raises(InputError, match=message) as err:
        DetectorGeometry.from_yaml(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def _shoot(eta: float, field: FieldProfile | None):
    pt = np.array([1.0, 1.0])
    phi = np.array([0.3, 1.3])
    momenta = np.stack([pt * np.cos(phi), pt * np.sin(phi), pt * np.sinh(eta)], 1)
    return propagate(GEOMETRY, vertices=np.zeros((2, 3)), momenta=momenta,
                     charges=np.array([1.0, -1.0]), masses=np.full(2, PION[1]),
                     multiple_scattering=False, field=field)  # fmt: skip


def test_a_flat_profile_gives_the_uniform_fields_crossings():
    flat = FieldProfile((0.0, 5000.0), (2.0, 2.0))
    for eta in (0.3, 2.5):
        uniform, profiled = _shoot(eta, None), _shoot(eta, flat)
        np.testing.assert_array_equal(profiled.layer, uniform.layer)
        np.testing.assert_allclose(profiled.position, uniform.position, rtol=0, atol=1e-9)


def test_a_forward_track_bends_less_where_the_field_falls():
    """At eta 2.5 a 1 GeV track reaches the strip disks at |z| > 2 m, where the measured field
    is a fraction of 2 T: its azimuth turns less between its last two crossings than in the
    uniform field, and by the ratio of the fields there (the step's midpoint field)."""
    uniform, profiled = _shoot(2.5, None), _shoot(2.5, GEOMETRY.field_profile)

    def last_turn(crossings):
        mine = crossings.particle == 0
        direction = np.arctan2(crossings.momentum[mine, 1], crossings.momentum[mine, 0])
        z = crossings.position[mine, 2]
        return abs(direction[-1] - direction[-2]), z[-2:]

    turn_uniform, _ = last_turn(uniform)
    turn_profiled, z = last_turn(profiled)
    assert z.min() > 2000
    ratio = turn_profiled / turn_uniform
    assert ratio < 0.5
    middle = GEOMETRY.field_profile.at(np.array([z.mean()]))[0] / 2.0
    assert ratio == pytest.approx(abs(middle), abs=0.05)


def test_field_profile_settings():
    """Recorded only when on; a geometry without a profile is refused in one line."""
    assert "field_profile" not in SimulationConfig(field_profile=False).to_json()
    assert '"field_profile": true' in SimulationConfig().to_json()  # on by default
    flat = DetectorGeometry(layers=GEOMETRY.layers, name="no-profile")
    with pytest.raises(InputError, match="'no-profile': field_profile needs a geometry with"):
        simulate_event(flat, SimulationConfig(pileup=1, field_profile=True), event_id=0, seed=0)
