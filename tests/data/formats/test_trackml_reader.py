"""Tests of the TrackML CSV reader: the real sample event, file variants, and every bad input."""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from partgnn.data.detector.geometry import DetectorGeometry, default_geometry
from partgnn.data.event import HIT_COLUMNS, PARTICLE_COLUMNS, TRUTH_COLUMNS
from partgnn.data.formats.trackml_reader import (
    find_trackml_events,
    read_trackml_event,
    read_trackml_events,
)
from partgnn.errors import InputError

TABLES = ("hits", "truth", "particles")
TRACKML_VOLUMES = {7, 8, 9, 12, 13, 14, 16, 17, 18}

# Ids above 2**53, as in TrackML, so that every test also checks they are never rounded.
BIG_IDS = {1: 2**62 + 1, 2: 4_507_310_479_114_241}


@pytest.fixture(scope="module")
def sample_prefix(sample_dir) -> Path:
    return sample_dir / "event000000001"


@pytest.fixture(scope="module")
def sample_event(sample_prefix):
    return read_trackml_event(sample_prefix)


@pytest.fixture(scope="module")
def sample_tables(sample_prefix) -> dict[str, pd.DataFrame]:
    """The sample's raw tables as pandas reads them (int64 / float64)."""
    return {t: pd.read_csv(f"{sample_prefix}-{t}.csv.gz") for t in TABLES}


@pytest.fixture
def small_tables(tiny_event) -> dict[str, pd.DataFrame]:
    """A valid 9-hit event (conftest's tiny event), for the bad-input tests to spoil."""
    tables = {t: getattr(tiny_event, t).copy() for t in TABLES}
    for table in ("truth", "particles"):
        tables[table]["particle_id"] = tables[table]["particle_id"].replace(BIG_IDS)
    return tables


def write_event(
    directory: Path,
    tables: dict[str, pd.DataFrame],
    *,
    suffix: str = ".csv",
    event: str = "event000000001",
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, frame in tables.items():
        frame.to_csv(directory / f"{event}-{name}{suffix}", index=False)
    return directory / event


def assert_input_error(func, *args, contains: tuple[str, ...], **kwargs) -> str:
    """Calls ``func``, expects an InputError whose one-line message holds every ``contains``."""
    with pytest.raises(InputError) as info:
        func(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message, message
    # No pandas / gzip exception chained behind it (a traceback would show it).
    assert info.value.__cause__ is None
    assert info.value.__context__ is None or info.value.__suppress_context__
    for text in contains:
        assert text in message, f"{text!r} not in {message!r}"
    return message


# --- the real sample event -----------------------------------------------------------------------


def test_sample_counts_match_provenance(sample_event, sample_prefix):
    assert sample_event.event_id == 1
    assert len(sample_event.hits) == 5527
    assert len(sample_event.truth) == 5527
    assert int((sample_event.truth["particle_id"] == 0).sum()) == 829
    assert len(sample_event.particles) == 548
    assert sample_event.attrs["source"] == "trackml"
    assert sample_event.attrs["path"] == str(sample_prefix)


def test_sample_columns_and_dtypes(sample_event):
    for table, columns in (
        (sample_event.hits, HIT_COLUMNS),
        (sample_event.truth, TRUTH_COLUMNS),
        (sample_event.particles, PARTICLE_COLUMNS),
    ):
        assert list(table.columns) == list(columns)
        assert dict(table.dtypes) == columns


def test_sample_truth_aligned_with_hits(sample_event, sample_tables):
    assert np.array_equal(sample_event.hits["hit_id"], sample_event.truth["hit_id"])
    raw = sample_tables["truth"].set_index("hit_id")
    expected = raw.loc[sample_event.hits["hit_id"].to_numpy(), "particle_id"].to_numpy()
    assert np.array_equal(sample_event.truth["particle_id"].to_numpy(), expected)


def test_sample_particle_ids_exact(sample_event, sample_prefix):
    # Compare with the decimal text of the file: any trip through float64 would change ~1e17 ids.
    with gzip.open(f"{sample_prefix}-particles.csv.gz", "rt") as f:
        text_ids = [int(row["particle_id"]) for row in csv.DictReader(f)]
    assert max(text_ids) > 2**53
    assert sample_event.particles["particle_id"].tolist() == text_ids


def test_sample_particles_known_and_zero_hit_ones_kept(sample_event):
    truth_ids = sample_event.truth["particle_id"]
    particle_ids = sample_event.particles["particle_id"]
    assert truth_ids[truth_ids != 0].isin(particle_ids).all()
    zero_hit = sample_event.particles["nhits"] == 0
    assert zero_hit.sum() == 80
    assert not particle_ids[zero_hit].isin(truth_ids).any()


def test_sample_volumes(sample_event):
    assert set(sample_event.hits["volume_id"].unique().tolist()) == TRACKML_VOLUMES


def test_sample_hits_lie_on_their_layers(sample_event):
    geometry = default_geometry()
    hits = sample_event.hits
    index = geometry.layer_index(hits["volume_id"].to_numpy(), hits["layer_id"].to_numpy())
    layers = [geometry.layers[i] for i in index]
    position = np.array([layer.position for layer in layers])
    barrel = np.array([layer.is_barrel for layer in layers])
    r = np.hypot(hits["x"].to_numpy(), hits["y"].to_numpy())
    z = hits["z"].to_numpy()
    # Real modules are staggered and tilted around the nominal surface by a few mm.
    assert barrel.any() and (~barrel).any()
    assert np.abs(r[barrel] - position[barrel]).max() < 7.0
    assert np.abs(z[~barrel] - position[~barrel]).max() < 7.0
    z_max = np.array([layer.z_max for layer in layers])
    r_min = np.array([layer.r_min for layer in layers])
    r_max = np.array([layer.r_max for layer in layers])
    assert (np.abs(z[barrel]) <= z_max[barrel]).all()
    assert (r[~barrel] >= r_min[~barrel] - 5).all() and (r[~barrel] <= r_max[~barrel] + 5).all()


# --- file variants -------------------------------------------------------------------------------


def test_csv_equals_csv_gz(tmp_path, sample_event, sample_prefix):
    for table in TABLES:
        with gzip.open(f"{sample_prefix}-{table}.csv.gz", "rb") as src:
            (tmp_path / f"event000000001-{table}.csv").write_bytes(src.read())
    event = read_trackml_event(tmp_path / "event000000001")
    for table in TABLES:
        pd.testing.assert_frame_equal(getattr(event, table), getattr(sample_event, table))


def test_particle_type_absent_gives_zero(tmp_path, sample_tables, sample_event):
    tables = dict(sample_tables, particles=sample_tables["particles"].drop(columns="particle_type"))
    event = read_trackml_event(write_event(tmp_path, tables))
    assert (event.particles["particle_type"] == 0).all()
    assert event.particles["particle_type"].dtype == np.int32
    pd.testing.assert_frame_equal(
        event.particles.drop(columns="particle_type"),
        sample_event.particles.drop(columns="particle_type"),
    )


def test_extra_columns_ignored_and_truth_order_free(tmp_path, small_tables):
    reference = read_trackml_event(write_event(tmp_path / "a", small_tables))
    hits = small_tables["hits"].assign(extra=1.5)
    truth = small_tables["truth"].sample(frac=1.0, random_state=0).assign(note="x")
    tables = dict(small_tables, hits=hits, truth=truth)
    event = read_trackml_event(write_event(tmp_path / "b", tables))
    for table in TABLES:
        pd.testing.assert_frame_equal(getattr(event, table), getattr(reference, table))


def test_huge_particle_ids_survive(tmp_path, small_tables):
    event = read_trackml_event(write_event(tmp_path, small_tables))
    # 2**62 + 1 would come back as 2**62 through float64.
    assert event.particles["particle_id"].tolist() == list(BIG_IDS.values())
    truth_ids = set(event.truth["particle_id"].tolist()) - {0}
    assert truth_ids == set(BIG_IDS.values())


def test_integers_written_as_floats_stay_exact(tmp_path, small_tables):
    reference = read_trackml_event(write_event(tmp_path / "a", small_tables))
    # One "0.0" makes pandas parse the whole particle_id column as float64, where ~1e16 ids are
    # no longer exact; the reader must still return the ids of the file.
    truth = small_tables["truth"].astype({"particle_id": object})
    truth.loc[truth["particle_id"] == 0, "particle_id"] = "0.0"
    hits = small_tables["hits"].astype({"volume_id": float})
    event = read_trackml_event(
        write_event(tmp_path / "b", dict(small_tables, truth=truth, hits=hits))
    )
    for table in TABLES:
        pd.testing.assert_frame_equal(getattr(event, table), getattr(reference, table))


def test_find_trackml_events(tmp_path, small_tables):
    write_event(tmp_path, small_tables, event="event000000002", suffix=".csv")
    write_event(tmp_path, small_tables, event="event000000010", suffix=".csv.gz")
    (tmp_path / "event000000002-cells.csv").write_text("hit_id,ch0,ch1,value\n1,2,3,0.5\n")
    (tmp_path / "README.txt").write_text("not an event")
    (tmp_path / "detectors.csv").write_text("volume_id\n")
    found = find_trackml_events(tmp_path)
    assert found == [(2, tmp_path / "event000000002"), (10, tmp_path / "event000000010")]
    events = list(read_trackml_events(tmp_path, cells=False))
    assert [e.event_id for e in events] == [2, 10]
    assert events[0].clusters is None
    assert len(events[0].hits) == len(events[1].hits) == 9


# --- bad input -----------------------------------------------------------------------------------


def test_missing_directory(tmp_path):
    missing = tmp_path / "nowhere"
    assert_input_error(find_trackml_events, missing, contains=("nowhere", "not found"))
    # Reported when called, not when first iterated.
    assert_input_error(read_trackml_events, missing, contains=("nowhere",))


def test_directory_is_a_file(tmp_path):
    path = tmp_path / "file.csv"
    path.write_text("a\n")
    assert_input_error(find_trackml_events, path, contains=("file.csv", "not a directory"))


def test_no_events_found(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "event000000001-truth.csv").write_text("hit_id\n")
    assert_input_error(find_trackml_events, empty, contains=("empty", "no TrackML events"))
    assert_input_error(read_trackml_events, empty, contains=("empty",))


def test_bad_prefix_name(tmp_path, small_tables):
    write_event(tmp_path, small_tables)
    assert_input_error(read_trackml_event, tmp_path / "run1", contains=("run1", "prefix"))


@pytest.mark.parametrize("table", TABLES)
def test_missing_table_file(tmp_path, small_tables, table):
    prefix = write_event(tmp_path, small_tables)
    (tmp_path / f"event000000001-{table}.csv").unlink()
    assert_input_error(
        read_trackml_event, prefix, contains=(f"event000000001-{table}.csv", "not found")
    )


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("hits.csv", b"", "empty file"),
        ("hits.csv", b"\x00\xff\xfe garbage \x81\x00\n\xc3\x28", "event000000001-hits.csv"),
        ("truth.csv", b"hit_id,particle_id\n1,2\n3,4,5,6\n", "Expected 2 fields in line 3"),
        ("truth.csv", b"hit_id,particle_id\n1,2,3\n3,4,5\n", "rows longer than the header"),
        ("particles.csv.gz", b"particle_id,vx\n1,2\n", "not a readable CSV"),
    ],
    ids=["empty", "binary-garbage", "ragged-row", "short-header", "not-gzip"],
)
def test_malformed_csv(tmp_path, small_tables, name, content, expected):
    prefix = write_event(tmp_path, small_tables)
    (tmp_path / f"event000000001-{name.split('.')[0]}.csv").unlink()
    (tmp_path / f"event000000001-{name}").write_bytes(content)
    assert_input_error(read_trackml_event, prefix, contains=(f"event000000001-{name}", expected))


def test_truncated_gzip(tmp_path, small_tables):
    prefix = write_event(tmp_path, small_tables, suffix=".csv.gz")
    path = tmp_path / "event000000001-truth.csv.gz"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert_input_error(
        read_trackml_event, prefix, contains=("event000000001-truth.csv.gz", "not a readable CSV")
    )


def test_header_only_hits(tmp_path, small_tables):
    tables = {name: frame.head(0) for name, frame in small_tables.items()}
    prefix = write_event(tmp_path, tables)
    assert_input_error(read_trackml_event, prefix, contains=("event000000001-hits.csv", "no hits"))


@pytest.mark.parametrize(
    ("table", "column"),
    [("hits", "x"), ("hits", "volume_id"), ("truth", "particle_id"), ("particles", "nhits")],
)
def test_missing_column(tmp_path, small_tables, table, column):
    small_tables[table] = small_tables[table].drop(columns=column)
    prefix = write_event(tmp_path, small_tables)
    assert_input_error(
        read_trackml_event,
        prefix,
        contains=(f"event000000001-{table}.csv", f"missing column {column!r}"),
    )


@pytest.mark.parametrize(
    ("table", "column", "value", "expected"),
    [
        ("hits", "x", "abc", "is not numeric (value 'abc' in data row 2)"),
        ("hits", "volume_id", "True", "is not numeric"),
        ("truth", "particle_id", "0x1f", "is not numeric"),
        ("truth", "tpx", "nan", "has an empty or NaN value in data row 2"),
        ("hits", "volume_id", "", "has an empty or NaN value in data row 2"),
        ("particles", "px", "inf", "has an infinite value in data row 2"),
        ("truth", "tz", "-inf", "has an infinite value in data row 2"),
        ("hits", "layer_id", "abc", "is not numeric (value 'abc' in data row 2)"),
        ("truth", "particle_id", "nan", "has an empty or NaN value in data row 2"),
        ("truth", "particle_id", "inf", "has an infinite value in data row 2"),
        ("truth", "particle_id", "1e17", "value '1e17' in data row 2 is not an exact integer"),
        ("truth", "particle_id", "7.5", "value '7.5' in data row 2 is not an integer"),
        ("hits", "layer_id", "2.5", "value '2.5' in data row 2 is not an integer (int32 expected)"),
        (
            "truth",
            "particle_id",
            str(2**63),
            "value 9223372036854775808 in data row 2 is out of range (int64 expected)",
        ),
        ("truth", "particle_id", str(2**70), "in data row 2 is out of range (int64 expected)"),
        ("hits", "module_id", str(2**40), "in data row 2 is out of range (int32 expected)"),
        ("hits", "z", "1e300", "in data row 2 is out of range (float32 expected)"),
    ],
)
def test_bad_value(tmp_path, small_tables, table, column, value, expected):
    frame = small_tables[table].astype({column: object})
    frame.iloc[1, frame.columns.get_loc(column)] = value
    small_tables[table] = frame
    prefix = write_event(tmp_path, small_tables)
    assert_input_error(
        read_trackml_event,
        prefix,
        contains=(f"event000000001-{table}.csv", f"column {column!r}", expected),
    )


def test_truncated_last_row_is_reported(tmp_path, small_tables):
    prefix = write_event(tmp_path, small_tables)
    path = tmp_path / "event000000001-hits.csv"
    text = path.read_text()
    path.write_text(text[: text.rindex(",")])  # the file ends in the middle of its last row
    assert_input_error(
        read_trackml_event,
        prefix,
        contains=("event000000001-hits.csv", "'module_id'", "empty or NaN", "data row 9"),
    )


@pytest.mark.parametrize(
    ("volume_id", "layer_id", "expected"),
    [(5, 2, "unknown volume_id 5"), (8, 3, "unknown layer_id 3 in volume_id 8")],
)
def test_unknown_volume_or_layer(tmp_path, small_tables, volume_id, layer_id, expected):
    small_tables["hits"].loc[5, ["volume_id", "layer_id"]] = [volume_id, layer_id]
    prefix = write_event(tmp_path, small_tables)
    assert_input_error(read_trackml_event, prefix, contains=("event000000001-hits.csv", expected))


def test_geometry_argument_is_used(tmp_path, small_tables):
    full = default_geometry()
    pixel_barrel = DetectorGeometry(
        layers=tuple(la for la in full.layers if la.volume_id == 8), name="pixel-barrel"
    )
    strips = DetectorGeometry(
        layers=tuple(la for la in full.layers if la.volume_id == 13), name="strips"
    )
    prefix = write_event(tmp_path, small_tables)
    assert read_trackml_event(prefix, geometry=pixel_barrel).attrs["geometry"] == "pixel-barrel"
    assert_input_error(
        read_trackml_event,
        prefix,
        geometry=strips,
        contains=("event000000001-hits.csv", "unknown volume_id 8", "'strips' has 13"),
    )


@pytest.mark.parametrize(
    ("table", "column"),
    [("hits", "hit_id"), ("truth", "hit_id"), ("particles", "particle_id")],
)
def test_duplicate_ids(tmp_path, small_tables, table, column):
    frame = small_tables[table]
    small_tables[table] = pd.concat([frame, frame.iloc[[1]]], ignore_index=True)
    prefix = write_event(tmp_path, small_tables)
    duplicate = int(frame[column].iloc[1])
    assert_input_error(
        read_trackml_event,
        prefix,
        contains=(f"event000000001-{table}.csv", f"duplicate {column} {duplicate}"),
    )


def test_hit_without_truth(tmp_path, small_tables):
    missing = int(small_tables["truth"]["hit_id"].iloc[7])
    small_tables["truth"] = small_tables["truth"].drop(index=small_tables["truth"].index[7])
    prefix = write_event(tmp_path, small_tables)
    assert_input_error(
        read_trackml_event,
        prefix,
        contains=("event000000001-truth.csv", f"no truth row for hit_id {missing}"),
    )


def test_truth_without_hit(tmp_path, small_tables):
    extra = small_tables["truth"].iloc[[0]].assign(hit_id=999_999_999)
    small_tables["truth"] = pd.concat([small_tables["truth"], extra], ignore_index=True)
    prefix = write_event(tmp_path, small_tables)
    assert_input_error(
        read_trackml_event,
        prefix,
        contains=("event000000001-truth.csv", "hit_id 999999999", "is not in"),
    )


def test_truth_particle_missing_from_particles(tmp_path, small_tables):
    dropped = int(small_tables["particles"]["particle_id"].iloc[0])
    small_tables["particles"] = small_tables["particles"].iloc[1:]
    prefix = write_event(tmp_path, small_tables)
    assert_input_error(
        read_trackml_event,
        prefix,
        contains=("event000000001-particles.csv", f"particle_id {dropped}", "missing"),
    )
