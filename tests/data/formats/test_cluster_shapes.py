"""Tests of cluster shapes: the real sample's cells read into features, checked hit by hit
against a plain per-hit computation, and every bad cells file refused in one line."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from partgnn.data.detector.detector_modules import detector_modules
from partgnn.data.detector.geometry import DetectorGeometry, default_geometry
from partgnn.data.files.storage import EventFile
from partgnn.data.files.writers import write_events
from partgnn.data.formats.cluster_shapes import (
    CLUSTER_COLUMNS,
    CLUSTER_FEATURES,
    cluster_features,
    hit_modules,
)
from partgnn.data.formats.trackml_reader import read_trackml_event
from partgnn.errors import InputError

TABLES = ("hits", "truth", "particles", "cells")


@pytest.fixture(scope="module")
def sample_event(sample_dir):
    return read_trackml_event(sample_dir / "event000000001")


@pytest.fixture(scope="module")
def raw(sample_dir) -> dict[str, pd.DataFrame]:
    tables = {t: pd.read_csv(sample_dir / f"event000000001-{t}.csv.gz") for t in TABLES}
    tables["detectors"] = pd.read_csv(sample_dir / "detectors.csv.gz")
    return tables


def plain_features(raw: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The features hit by hit, as Exa.TrkX's definitions read, with pandas (the oracle)."""
    detectors = raw["detectors"].set_index(["volume_id", "layer_id", "module_id"])
    cells = raw["cells"].groupby("hit_id")
    rows = []
    for hit in raw["hits"].itertuples():
        module = detectors.loc[(hit.volume_id, hit.layer_id, hit.module_id)]
        mine = cells.get_group(hit.hit_id)
        n_u = mine.ch0.max() - mine.ch0.min() + 1
        n_v = mine.ch1.max() - mine.ch1.min() + 1
        box = np.array([n_u * module.pitch_u, n_v * module.pitch_v, 2 * module.module_t])
        rotation = np.array(
            [[module[f"rot_{a}{b}"] for b in "uvw"] for a in "xyz"], dtype=np.float64
        )
        turned = rotation @ box
        theta_l = np.arccos(box[2] / np.linalg.norm(box))
        theta_g = np.arccos(turned[2] / np.linalg.norm(turned))
        rows.append({
            "cell_count": len(mine), "cell_val": mine.value.sum(),
            "extent_u": n_u, "extent_v": n_v, "lx": box[0], "ly": box[1], "lz": box[2],
            "leta": -np.log(np.tan(theta_l / 2)), "lphi": np.arctan2(box[1], box[0]),
            "geta": -np.log(np.tan(theta_g / 2)), "gphi": np.arctan2(turned[1], turned[0]),
        })  # fmt: skip
    return pd.DataFrame(rows)


def test_sample_features_match_a_plain_per_hit_computation(sample_event, raw):
    assert list(sample_event.clusters.columns) == list(CLUSTER_COLUMNS)
    hits = sample_event.hits
    layer = default_geometry().layer_index(hits["volume_id"], hits["layer_id"])
    on = hit_modules(detector_modules(default_geometry()), layer,
                     hits["module_id"].to_numpy(np.int64), where="sample")  # fmt: skip
    clusters = cluster_features(sample_event.clusters, on)
    assert list(clusters.columns) == list(CLUSTER_FEATURES)
    assert len(clusters) == len(sample_event.hits) == 5527
    assert (clusters.dtypes == np.float32).all()
    expected = plain_features(raw)
    for name in CLUSTER_FEATURES:
        np.testing.assert_allclose(clusters[name], expected[name], rtol=2e-6, atol=2e-6)
    # The sample's 18,564 cells all count.
    assert clusters["cell_count"].sum() == len(raw["cells"]) == 18564
    # Strips read 1 per cell; pixels (volumes 7-9) less.
    strips = sample_event.hits["volume_id"].to_numpy() >= 12
    np.testing.assert_array_equal(clusters["cell_val"][strips], clusters["cell_count"][strips])
    assert (clusters["cell_val"][~strips] < clusters["cell_count"][~strips]).all()


def test_features_survive_an_events_file(tmp_path, sample_event):
    write_events(tmp_path / "events.h5", [sample_event])
    with EventFile(tmp_path / "events.h5") as events:
        back = events[0]
    pd.testing.assert_frame_equal(back.clusters, sample_event.clusters)


def test_ignoring_cells_reads_the_event_without_them(sample_dir, sample_event):
    event = read_trackml_event(sample_dir / "event000000001", cells=False)
    assert event.clusters is None
    pd.testing.assert_frame_equal(event.hits, sample_event.hits)


def spoiled(tmp_path: Path, raw, **tables: pd.DataFrame) -> Path:
    """The sample event in ``tmp_path`` with some of its tables replaced."""
    for name in TABLES:
        frame = tables.get(name, raw[name])
        frame.to_csv(tmp_path / f"event000000001-{name}.csv", index=False)
    return tmp_path / "event000000001"


def one_line_error(prefix: Path, *contains: str, geometry: DetectorGeometry | None = None) -> None:
    with pytest.raises(InputError) as info:
        read_trackml_event(prefix, geometry=geometry)
    message = str(info.value)
    assert "\n" not in message
    assert "cells.csv" in message, message
    for text in contains:
        assert text in message, f"{text!r} not in {message!r}"


def test_cells_of_another_event_refused(tmp_path, raw):
    # Another event's cells name the same hit ids (1..N) on other modules: shift every cell's
    # hit by 7 rows, as a file of another event would.
    cells = raw["cells"].copy()
    ids = np.sort(raw["hits"]["hit_id"].to_numpy())
    cells["hit_id"] = ids[(np.searchsorted(ids, cells["hit_id"]) + 7) % len(ids)]
    one_line_error(spoiled(tmp_path, raw, cells=cells), "away from their cells", "another event")


def test_cells_of_no_hit_refused(tmp_path, raw):
    cells = pd.concat([raw["cells"], pd.DataFrame([{"hit_id": 999999, "ch0": 1, "ch1": 1,
                                                    "value": 0.5}])])  # fmt: skip
    one_line_error(spoiled(tmp_path, raw, cells=cells), "hit_id 999999", "not a hit")


def test_hit_without_cells_refused(tmp_path, raw):
    first = int(raw["hits"]["hit_id"].iloc[0])
    cells = raw["cells"][raw["cells"]["hit_id"] != first]
    one_line_error(spoiled(tmp_path, raw, cells=cells), f"hit_id {first} has no cells")


@pytest.mark.parametrize(
    ("column", "value", "expected"),
    [("ch0", -1, "'ch0' is negative"), ("value", -0.5, "'value' is negative"),
     ("ch1", 5000, "beyond its module's"), ("ch0", "x", "'ch0' is not numeric"),
     ("value", float("nan"), "'value' has an empty or NaN")],
)  # fmt: skip
def test_bad_cell_values_refused(tmp_path, raw, column, value, expected):
    cells = raw["cells"].astype({column: object})
    cells.loc[3, column] = value
    one_line_error(spoiled(tmp_path, raw, cells=cells), expected)


def test_missing_cells_column_refused(tmp_path, raw):
    one_line_error(spoiled(tmp_path, raw, cells=raw["cells"].drop(columns="ch1")), "'ch1'")


def test_module_missing_from_the_detector_table_refused(tmp_path, raw, sample_dir):
    detectors = raw["detectors"]
    hit = raw["hits"].iloc[0]
    gone = (
        (detectors.volume_id == hit.volume_id)
        & (detectors.layer_id == hit.layer_id)
        & (detectors.module_id == hit.module_id)
    )
    table = tmp_path / "detectors.csv"
    detectors[~gone].to_csv(table, index=False)
    geometry = DetectorGeometry(**{**default_geometry().__dict__, "modules": str(table)})
    one_line_error(
        spoiled(tmp_path, raw), f"module_id {int(hit.module_id)} of hit_id {int(hit.hit_id)}",
        "not in the detector table", geometry=geometry,
    )  # fmt: skip


def test_a_table_without_pitch_refused_with_the_way_out(tmp_path, raw):
    table = tmp_path / "detectors.csv"
    raw["detectors"].drop(columns="pitch_u").to_csv(table, index=False)
    geometry = DetectorGeometry(**{**default_geometry().__dict__, "modules": str(table)})
    one_line_error(spoiled(tmp_path, raw), "pitch_u", "--ignore-cells", geometry=geometry)


def test_gzip_cells_read_like_plain(tmp_path, sample_dir, sample_event):
    for name in TABLES:
        shutil.copy(sample_dir / f"event000000001-{name}.csv.gz", tmp_path)
    with gzip.open(tmp_path / "event000000001-cells.csv.gz", "rb") as packed:
        (tmp_path / "event000000001-cells.csv").write_bytes(packed.read())
    (tmp_path / "event000000001-cells.csv.gz").unlink()
    event = read_trackml_event(tmp_path / "event000000001")
    pd.testing.assert_frame_equal(event.clusters, sample_event.clusters)
