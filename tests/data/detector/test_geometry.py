from pathlib import Path

import numpy as np
import pytest

from partgnn.data.detector.geometry import DetectorGeometry, default_geometry, load_geometry
from partgnn.errors import InputError


def test_default_geometry_has_the_trackml_layers():
    geometry = default_geometry()
    per_volume = {}
    for layer in geometry.layers:
        per_volume[layer.volume_id] = per_volume.get(layer.volume_id, 0) + 1
    assert per_volume == {7: 7, 8: 4, 9: 7, 12: 6, 13: 4, 14: 6, 16: 6, 17: 2, 18: 6}
    assert geometry.b_field == 2.0
    barrel_radii = [la.position for la in geometry.layers if la.volume_id == 8]
    assert barrel_radii == [32, 72, 116, 172]


def test_yaml_geometry_equals_real_detectors_file(sample_dir):
    from_yaml = default_geometry()
    from_csv = DetectorGeometry.from_detectors_csv(sample_dir / "detectors.csv.gz")
    assert len(from_csv) == len(from_yaml) == 48
    for a, b in zip(from_yaml.layers, from_csv.layers, strict=True):
        assert (a.volume_id, a.layer_id, a.kind) == (b.volume_id, b.layer_id, b.kind)
        assert b.position == pytest.approx(a.position, abs=2.0)
        for name in ("r_min", "r_max", "z_min", "z_max"):
            assert getattr(b, name) == pytest.approx(getattr(a, name), abs=2.0), name
        assert b.resolution == pytest.approx(a.resolution, rel=0.05)


def test_load_geometry_dispatches_on_suffix(sample_dir):
    assert load_geometry(None) == default_geometry()
    assert len(load_geometry(sample_dir / "detectors.csv.gz")) == 48


def test_layer_index_maps_and_rejects_unknown_ids():
    geometry = default_geometry()
    index = geometry.layer_index(np.array([8, 8, 18]), np.array([2, 8, 12]))
    layers = [geometry.layers[i] for i in index]
    assert [(la.volume_id, la.layer_id) for la in layers] == [(8, 2), (8, 8), (18, 12)]
    with pytest.raises(InputError, match=r"hits.csv: unknown volume_id 11"):
        geometry.layer_index(np.array([8, 11]), np.array([2, 2]), where="hits.csv")
    with pytest.raises(InputError, match=r"unknown layer_id 10 in volume_id 8"):
        geometry.layer_index(np.array([8]), np.array([10]))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("volumes: [", "not valid YAML"),
        ("name: x\n", "'volumes' list"),
        ("volumes:\n  - {volume_id: 8, kind: barrel}\n", "lacks field 'layer_ids'"),
        (
            "volumes:\n  - {volume_id: 8, kind: barrel, layer_ids: [2], positions: [32],"
            " material: 0.02, resolution: [0.01, 0.01]}\n",
            "lacks field 'half_length'",
        ),
    ],
)
def test_bad_geometry_yaml_gives_one_clear_line(tmp_path: Path, text: str, message: str):
    path = tmp_path / "geo.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as info:
        DetectorGeometry.from_yaml(path)
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_geometry_files(tmp_path: Path):
    with pytest.raises(InputError, match="not found"):
        DetectorGeometry.from_yaml(tmp_path / "nope.yaml")
    with pytest.raises(InputError, match="not found"):
        DetectorGeometry.from_detectors_csv(tmp_path / "nope.csv")
    bad = tmp_path / "detectors.csv"
    bad.write_text("volume_id,layer_id\n7,2\n")
    with pytest.raises(InputError, match="missing column 'cx'"):
        DetectorGeometry.from_detectors_csv(bad)
