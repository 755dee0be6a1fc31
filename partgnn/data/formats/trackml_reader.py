"""Reader for real TrackML events: ``eventN-{hits,truth,particles}.csv[.gz]`` to :class:`Event`,
with the cluster features of ``eventN-cells.csv[.gz]`` where it exists
(:mod:`partgnn.data.formats.cluster_shapes`).

Every defect of the files (missing, unreadable, a bad column or value, an unknown volume, duplicate
or unmatched ids) becomes one :class:`~partgnn.errors.InputError` line that names the file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from partgnn.data.detector.detector_modules import detector_modules
from partgnn.data.detector.geometry import DetectorGeometry, default_geometry
from partgnn.data.event import Event
from partgnn.data.formats.cluster_shapes import read_clusters
from partgnn.data.formats.trackml_columns import (
    CELLS_TABLE,
    TABLE_COLUMNS,
    read_columns,
    read_table,
)
from partgnn.errors import InputError

__all__ = ["find_trackml_events", "read_trackml_event", "read_trackml_events"]

#: Suffixes tried for each table, in this order (the first one that exists is read).
SUFFIXES = (".csv", ".csv.gz")


_HITS_FILE = re.compile(r"^event(\d+)-hits\.csv(?:\.gz)?$")
_PREFIX = re.compile(r"^event(\d+)$")


def find_trackml_events(directory: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """Lists the TrackML events of a folder.

    An event is present when its hits file ``eventNNNNNNNNN-hits.csv`` or ``.csv.gz`` exists; its
    other files are only looked for when it is read.

    Args:
        directory: The folder holding the CSV files (not searched recursively).

    Returns:
        ``(event_id, prefix)`` pairs sorted by event id, where ``prefix`` is e.g.
        ``directory/event000000001`` (the path of the files without ``-hits.csv.gz``).

    Raises:
        InputError: If the folder does not exist or holds no TrackML event.
    """
    directory = Path(directory)
    if not directory.exists():
        raise InputError(f"{directory}: directory not found")
    if not directory.is_dir():
        raise InputError(f"{directory}: not a directory")
    # A set, because an event may have both a .csv and a .csv.gz hits file.
    events = set()
    for path in directory.iterdir():
        match = _HITS_FILE.match(path.name)
        if match and path.is_file():
            events.add((int(match.group(1)), directory / f"event{match.group(1)}"))
    if not events:
        raise InputError(
            f"{directory}: no TrackML events found (expected files like event000000001-hits.csv.gz)"
        )
    return sorted(events)


def read_trackml_events(
    directory: str | os.PathLike[str],
    *,
    geometry: DetectorGeometry | None = None,
    cells: bool = True,
) -> Iterator[Event]:
    """Reads every TrackML event of a folder, one at a time, in event-id order.

    The folder is listed (and the geometry loaded) when this function is called, so a missing
    folder or an empty one is reported at once; each event's files are read when it is reached.

    Args:
        directory: The folder holding the CSV files.
        geometry: Detector geometry the hits are checked against; the default TrackML geometry
            when ``None``.
        cells: Read each event's cells file where it exists (``False``: ignore them).

    Returns:
        An iterator of normalized, validated events.

    Raises:
        InputError: As :func:`find_trackml_events` (at once) and :func:`read_trackml_event`
            (while iterating).
    """
    events = find_trackml_events(directory)
    geometry = geometry if geometry is not None else default_geometry()
    return (read_trackml_event(prefix, geometry=geometry, cells=cells) for _, prefix in events)


def read_trackml_event(
    prefix: str | os.PathLike[str],
    *,
    geometry: DetectorGeometry | None = None,
    cells: bool = True,
) -> Event:
    """Reads one TrackML event from its hits, truth and particles CSV files, and its cells.

    Each table is read from ``{prefix}-{table}.csv`` or, if that is absent, ``.csv.gz``; columns
    beyond the TrackML ones are ignored. A particles file without ``particle_type`` gets 0
    there. Where ``{prefix}-cells.csv[.gz]`` exists (and ``cells``), every hit gets its
    cluster's features (:func:`~partgnn.data.formats.cluster_shapes.read_clusters`: the geometry's
    module table must give each hit's module with its thickness and pitch).

    The hits keep their file order; truth rows are matched to hits by ``hit_id`` (so a truth file
    in another order is fine), and every hit must have exactly one truth row and vice versa.
    Every non-zero truth ``particle_id`` must be in the particles table (true of TrackML data, where
    even particles that left no hit are listed); such zero-hit particles are kept.

    Args:
        prefix: The files' common path, e.g. ``train_1/event000001000``; its name gives the
            event id.
        geometry: Detector geometry whose layers every hit's ``(volume_id, layer_id)`` must name;
            the default TrackML geometry when ``None``.

    Returns:
        The event with exactly the columns and dtypes of :mod:`partgnn.data.event` and attrs
        ``source="trackml"``, ``path`` (the prefix) and ``geometry`` (the geometry's name).

    Raises:
        InputError: One line naming the file and what is wrong: a missing or unreadable file,
            a missing column, a non-numeric, non-finite, fractional or out-of-range value (with
            its column and data row, counted from 1 after the header), an unknown volume or
            layer, a duplicate or unmatched hit id, or a particle missing from the particles
            table; for the cells, a cell of no hit, a hit without cells, a negative channel or
            charge, a channel beyond its module, a hit's module missing from the module table,
            or cells away from their hits (another event's).
    """
    prefix = Path(prefix)
    match = _PREFIX.match(prefix.name)
    if match is None:
        raise InputError(
            f"{prefix}: not a TrackML event prefix (expected a name like event000000001)"
        )
    geometry = geometry if geometry is not None else default_geometry()
    paths = {table: _table_path(prefix, table) for table in TABLE_COLUMNS}
    hits, truth, particles = (read_table(paths[table], table) for table in TABLE_COLUMNS)

    if len(hits) == 0:
        raise InputError(f"{paths['hits']}: no hits (the file has a header but no rows)")
    layer = geometry.layer_index(
        hits["volume_id"].to_numpy(), hits["layer_id"].to_numpy(), where=str(paths["hits"])
    )
    _check_unique(hits, "hit_id", paths["hits"])
    _check_unique(truth, "hit_id", paths["truth"])
    _check_unique(particles, "particle_id", paths["particles"])
    truth = _align_truth(hits, truth, paths["hits"], paths["truth"])
    _check_particles_known(truth, particles, paths["truth"], paths["particles"])
    cells_path = _cells_path(prefix) if cells else None
    clusters = None
    if cells_path is not None:
        modules = detector_modules(geometry)
        if modules is None or not modules.has_readout:
            raise InputError(
                f"{cells_path}: geometry {geometry.name!r} has no module table with thickness "
                "and pitch (module_t, pitch_u, pitch_v), so its cells cannot be read (import "
                "with --ignore-cells)"
            )
        table = read_columns(cells_path, CELLS_TABLE)
        clusters = read_clusters(table, hits, layer, modules, where=str(cells_path))

    event = Event(
        event_id=int(match.group(1)),
        hits=hits,
        truth=truth,
        particles=particles,
        attrs={"source": "trackml", "path": str(prefix), "geometry": geometry.name},
        clusters=clusters,
    ).normalized()
    # The checks above already cover what validate() checks; it stays as the shared contract.
    event.validate(where=str(prefix))
    return event


def _table_path(prefix: Path, table: str) -> Path:
    candidates = [prefix.with_name(f"{prefix.name}-{table}{suffix}") for suffix in SUFFIXES]
    for path in candidates:
        if path.is_file():
            return path
    raise InputError(
        f"{candidates[-1]}: {table} file not found (nor {candidates[0].name}) for event "
        f"{prefix.name}"
    )


def _cells_path(prefix: Path) -> Path | None:
    """The event's cells file, or ``None`` where it has none."""
    for suffix in SUFFIXES:
        path = prefix.with_name(f"{prefix.name}-{CELLS_TABLE}{suffix}")
        if path.is_file():
            return path
    return None


def _check_unique(frame: pd.DataFrame, column: str, path: Path) -> None:
    duplicated = frame[column].duplicated().to_numpy()
    if duplicated.any():
        row = int(np.flatnonzero(duplicated)[0])
        raise InputError(
            f"{path}: duplicate {column} {int(frame[column].iloc[row])} (data row {row + 1})"
        )


def _align_truth(
    hits: pd.DataFrame, truth: pd.DataFrame, hits_path: Path, truth_path: Path
) -> pd.DataFrame:
    """Reorders truth rows to follow the hits row by row; both must hold the same hit ids."""
    hit_ids = hits["hit_id"].to_numpy()
    truth_ids = truth["hit_id"].to_numpy()
    if np.array_equal(hit_ids, truth_ids):
        return truth  # the usual case: TrackML writes both files in hit_id order
    order = pd.Index(truth_ids).get_indexer(hit_ids)
    if (order < 0).any():
        row = int(np.flatnonzero(order < 0)[0])
        raise InputError(
            f"{truth_path}: no truth row for hit_id {int(hit_ids[row])} of {hits_path.name}"
        )
    if len(truth_ids) != len(hit_ids):
        extra = np.flatnonzero(~np.isin(truth_ids, hit_ids))[0]
        raise InputError(
            f"{truth_path}: hit_id {int(truth_ids[extra])} (data row {extra + 1}) is not in "
            f"{hits_path.name}"
        )
    return truth.iloc[order].reset_index(drop=True)


def _check_particles_known(
    truth: pd.DataFrame, particles: pd.DataFrame, truth_path: Path, particles_path: Path
) -> None:
    particle_ids = truth["particle_id"].to_numpy()
    known = (particle_ids == 0) | np.isin(particle_ids, particles["particle_id"].to_numpy())
    if not known.all():
        unknown = particle_ids[~known]
        raise InputError(
            f"{particles_path}: particle_id {int(unknown[0])} of {truth_path.name} is missing "
            f"({len(np.unique(unknown))} particle(s) of the truth file are not in this file)"
        )
