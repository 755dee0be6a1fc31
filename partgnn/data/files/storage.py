"""HDF5 storage of events and event graphs: atomic writes, lazy per-event reads.

Schema (format version 2; every kind of file shares the layout, see ``docs/DATA_FORMAT.md``)::

    /                         attrs: format ("partgnn-events" | "partgnn-graphs"),
                                     format_version, partgnn_version, created, provenance...
    /events/event000000001/   attrs: event_id and per-event provenance or quality
        hits/<column>         (events files) one 1-D dataset per TrackML column
        truth/<column>
        particles/<column>
        clusters/<column>     (events with cells) one per cluster feature, row i of hit i
        x, pos, edge_index... (graphs files) one dataset per graph field

Files are written under a temporary name in the target's folder and renamed into place only when
complete, so a crash never leaves a half-written file under the final name.

Integrity: every dataset and attribute is checksummed (:mod:`partgnn.data.files.h5_files`), and
every graph read passes :func:`~partgnn.data.graphs.graph_fields.check_graph`.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import NamedTuple, TypeVar

import h5py
import numpy as np
import pandas as pd
import torch
from torch_geometric.data import Data

from partgnn.data.event import TABLES, Event
from partgnn.data.files.h5_files import (
    EXTRA_GROUP,
    LazyH5File,
    create_h5,
    damaged_file_errors,
    decode_attr,
    event_key,
    group_nbytes,
    read_array,
    write_array,
    write_attrs,
    write_root_attrs,
)
from partgnn.data.files.output_files import SpaceGuard, atomic_output
from partgnn.data.formats.cluster_shapes import CLUSTER_COLUMNS
from partgnn.data.graphs.graph_fields import (
    GRAPH_FIELDS,
    EventShape,
    check_graph,
)
from partgnn.errors import InputError, first_line

T = TypeVar("T")

#: 2: every dataset checksummed (Fletcher-32), checksummed object headers (:data:`LIBVER`).
FORMAT_VERSION = 2

EVENTS_FORMAT = "partgnn-events"
GRAPHS_FORMAT = "partgnn-graphs"
SCORES_FORMAT = "partgnn-scores"

#: The group of an events file's event that holds its hits' cluster features, where it has them.
CLUSTERS_TABLE = "clusters"

#: Fields kept beside a graph: name -> array.
Extra = dict[str, np.ndarray]


def write_events(
    path: str | os.PathLike[str],
    events: Iterable[Event],
    *,
    provenance: dict[str, object] | None = None,
) -> int:
    """Writes events to an HDF5 events file, atomically, streaming one event at a time.

    Args:
        path: Output file.
        events: Events to store (each is validated first).
        provenance: Root attributes (source, command, configuration...); values that are not
            HDF5 scalars are stored as JSON strings.

    Returns:
        The number of events written.

    Raises:
        InputError: If an event is invalid or two events share an id (nothing is written).
    """

    def normalized_events() -> Iterator[_EventRecord]:
        for event in events:
            event = event.normalized()
            event.validate()
            tables = [getattr(event, t) for t in TABLES] + [event.clusters]
            nbytes = sum(int(t.memory_usage(index=False).sum()) for t in tables if t is not None)
            fill = functools.partial(_write_tables, event=event)
            yield _EventRecord(event.event_id, event.attrs, fill, nbytes)

    return _write_event_groups(path, EVENTS_FORMAT, provenance, normalized_events())


def write_graphs(
    path: str | os.PathLike[str],
    graphs: Iterable[tuple[Data, dict[str, object]] | tuple[Data, dict[str, object], Extra]],
    *,
    provenance: dict[str, object] | None = None,
) -> int:
    """Writes event graphs and their construction quality to an HDF5 graphs file, atomically.

    Args:
        path: Output file.
        graphs: ``(graph, quality)`` pairs, or ``(graph, quality, extra)``; ``graph`` carries
            the fields of :data:`GRAPH_FIELDS` and ``event_id``; ``quality`` becomes the
            event's attributes; ``extra`` (name -> array) is stored beside the graph under
            ``extra/`` (fields of a graph made elsewhere, kept as they came:
            :meth:`GraphFile.extra`).
        provenance: Root attributes (source file and checksum, build configuration...).

    Returns:
        The number of graphs written.
    """
    items = (
        _EventRecord(
            int(graph.event_id),
            quality,
            functools.partial(_write_graph_fields, graph=graph, extra=extra[0] if extra else {}),
            sum(v.numel() * v.element_size() for v in graph.values() if torch.is_tensor(v))
            + sum(a.nbytes for a in (extra[0] if extra else {}).values()),
        )
        for graph, quality, *extra in graphs
    )
    return _write_event_groups(path, GRAPHS_FORMAT, provenance, items)


def _write_tables(group: h5py.Group, *, event: Event) -> None:
    tables = dict(TABLES)
    if event.clusters is not None:
        tables[CLUSTERS_TABLE] = CLUSTER_COLUMNS
    for table_name, columns in tables.items():
        table = event.clusters if table_name == CLUSTERS_TABLE else getattr(event, table_name)
        table_group = group.create_group(table_name)
        for column in columns:
            write_array(table_group, column, table[column].to_numpy())


def _write_graph_fields(group: h5py.Group, *, graph: Data, extra: Extra) -> None:
    for name, dtype in GRAPH_FIELDS.items():
        value = getattr(graph, name, None)
        if value is None:
            raise InputError(f"graph of {group.name} lacks field {name!r}")
        array = value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
        write_array(group, name, array.astype(dtype, copy=False))
    if extra:
        extra_group = group.create_group(EXTRA_GROUP)
        for name, array in extra.items():
            write_array(extra_group, name, np.asarray(array))


class _EventRecord(NamedTuple):
    """One event to write: ``fill(group)`` writes its datasets, about ``nbytes`` of data."""

    event_id: int
    attrs: dict[str, object]
    fill: Callable[[h5py.Group], None]
    nbytes: int


def _write_event_groups(
    path: str | os.PathLike[str],
    fmt: str,
    provenance: dict[str, object] | None,
    events: Iterable[_EventRecord],
) -> int:
    """Writes a partgnn file atomically: root attributes, then one group per event.

    Before each event the disk must have room for it (:class:`SpaceGuard`).
    """
    with atomic_output(path) as tmp, create_h5(tmp) as h5:
        write_root_attrs(h5, fmt, provenance, version=FORMAT_VERSION)
        group = h5.create_group("events")
        guard = SpaceGuard(path, [tmp])
        n_events = 0
        for event_id, attrs, fill, nbytes in events:
            guard.check(nbytes)
            key = event_key(event_id)
            if key in group:
                raise InputError(f"{path}: two events with event_id {event_id}")
            event_group = group.create_group(key)
            event_group.attrs["event_id"] = int(event_id)
            write_attrs(event_group, attrs)
            fill(event_group)
            h5.flush()
            guard.written()
            n_events += 1
        h5.attrs["n_events"] = n_events
    return n_events


def event_order(key: str) -> tuple[int, str]:
    """The order of an event group's name (``event000000001``): by its event id."""
    number = key.removeprefix("event")
    return (int(number), key) if number.isdigit() else (-1, key)


class _EventStore:
    """Lazy reader of a partgnn HDF5 file: opens it, checks format and version, lists events."""

    expected_format: str = ""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._h5 = LazyH5File(self.path)
        with damaged_file_errors(self.path):
            self._read_index()

    def _read_index(self) -> None:
        h5 = self._h5.get()
        fmt = decode_attr(h5.attrs.get("format"))
        if fmt != self.expected_format:
            raise InputError(
                f"{self.path}: not a {self.expected_format} file (format attribute is {fmt!r})"
            )
        version = int(h5.attrs.get("format_version", -1))
        if version != FORMAT_VERSION:
            raise InputError(
                f"{self.path}: format version {version}, this partgnn reads {FORMAT_VERSION}"
                + (" (version 1 files carry no checksums: write it again)" if version == 1 else "")
            )
        if "events" not in h5:
            raise InputError(f"{self.path}: no 'events' group (truncated or not partgnn?)")
        # (by event id: as text, event1000000000 would come before event999999999)
        self.keys: list[str] = sorted(h5["events"].keys(), key=event_order)
        self.attrs: dict[str, object] = {k: decode_attr(v) for k, v in h5.attrs.items()}

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def event_ids(self) -> list[int]:
        return [int(key.removeprefix("event")) for key in self.keys]

    def _group(self, index: int) -> tuple[str, h5py.Group]:
        if not -len(self.keys) <= index < len(self.keys):
            raise IndexError(f"{self.path}: event index {index} out of range ({len(self)} events)")
        key = self.keys[index]
        with damaged_file_errors(self.path, key):
            return key, self._h5.get()["events"][key]

    @property
    def h5(self) -> h5py.File:
        """The open HDF5 file."""
        return self._h5.get()

    def close(self) -> None:
        self._h5.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class EventFile(_EventStore):
    """Reads events lazily from an events file written by :func:`write_events`.

    Example:
        >>> with EventFile("events.h5") as events:
        ...     first = events[0]
    """

    expected_format = EVENTS_FORMAT

    def __getitem__(self, index: int) -> Event:
        key, group = self._group(index)
        try:
            tables = {
                table_name: pd.DataFrame({c: read_array(group[table_name], c) for c in columns})
                for table_name, columns in TABLES.items()
            }
            clusters = None
            if CLUSTERS_TABLE in group:
                clusters = pd.DataFrame(
                    {c: read_array(group[CLUSTERS_TABLE], c) for c in CLUSTER_COLUMNS}
                )
            attrs = {k: decode_attr(v) for k, v in group.attrs.items() if k != "event_id"}
            event = Event(
                event_id=int(group.attrs["event_id"]), attrs=attrs, clusters=clusters, **tables
            )
        except (KeyError, OSError) as err:
            raise InputError(f"{self.path}: {key} is unreadable ({first_line(err)})") from None
        event.validate(where=f"{self.path}: {key}")
        return event

    def __iter__(self) -> Iterator[Event]:
        for index in range(len(self)):
            yield self[index]


class GraphFile(_EventStore):
    """Reads event graphs lazily from a graphs file written by :func:`write_graphs`."""

    expected_format = GRAPHS_FORMAT

    def __getitem__(self, index: int) -> Data:
        key, group = self._group(index)
        try:
            fields = {name: torch.from_numpy(read_array(group, name)) for name in GRAPH_FIELDS}
            event_id = int(group.attrs["event_id"])
        except (KeyError, OSError) as err:
            raise InputError(f"{self.path}: {key} is unreadable ({first_line(err)})") from None
        fields["y"] = fields["y"].to(torch.float32)
        graph = Data(**fields, event_id=event_id)
        graph.num_nodes = fields["x"].shape[0]
        where = f"{self.path}: {key}"
        check_graph(graph, where=where)
        self._check_widths(graph, where=where)
        return graph

    def n_edges(self, index: int) -> int:
        """Edges of graph ``index`` (read from the file's index alone, nothing decoded)."""
        return self._from_index(index, lambda group: int(group["edge_index"].shape[1]))

    def shape(self, index: int) -> EventShape:
        """Nodes, edges and decoded bytes of graph ``index`` (from the file's index alone)."""
        return self._from_index(
            index,
            lambda group: EventShape(
                nodes=int(group["x"].shape[0]),
                edges=int(group["edge_index"].shape[1]),
                halo=0,
                nbytes=group_nbytes(group),
            ),
        )

    def _from_index(self, index: int, reader: Callable[[h5py.Group], T]) -> T:
        """``reader`` applied to graph ``index``'s group; a damaged group is a one-line error."""
        key, group = self._group(index)
        try:
            return reader(group)
        except (KeyError, OSError, IndexError) as err:
            raise InputError(f"{self.path}: {key} is unreadable ({first_line(err)})") from None

    def _check_widths(self, graph: Data, *, where: str) -> None:
        """x and edge_attr have one column per feature the file's attributes name."""
        for field, names_attr in (("x", "node_features"), ("edge_attr", "edge_features")):
            names = self.attrs.get(names_attr)
            if names is None:
                continue
            expected = len(json.loads(str(names)))
            width = graph[field].shape[1]
            if width != expected:
                raise InputError(
                    f"{where}: {field} has {width} columns but the file's {names_attr} name "
                    f"{expected} (an event from another graph construction?)"
                )

    def extra(self, index: int) -> Extra:
        """The fields kept beside graph ``index`` (:func:`write_graphs`'s ``extra``; empty for
        graphs built here)."""

        def read(group: h5py.Group) -> Extra:
            kept = group.get(EXTRA_GROUP)
            return {} if kept is None else {name: read_array(kept, name) for name in kept}

        return self._from_index(index, read)

    def quality(self, index: int) -> dict[str, object]:
        """The construction quality stored with event ``index`` (n_edges, efficiency, ...)."""
        key, group = self._group(index)
        with damaged_file_errors(self.path, key):
            return {k: decode_attr(v) for k, v in group.attrs.items()}

    def __iter__(self) -> Iterator[Data]:
        for index in range(len(self)):
            yield self[index]


def write_scores(
    path: str | os.PathLike[str],
    scores: Iterable[tuple[int, np.ndarray]],
    *,
    provenance: dict[str, object] | None = None,
) -> int:
    """Writes per-event edge scores (in the global edge order of the graphs file), atomically.

    Args:
        path: Output file.
        scores: ``(event_id, scores (E,))`` pairs.
        provenance: Root attributes (checkpoint, source graphs file and its checksum...).

    Returns:
        The number of events written.
    """
    items = (
        _EventRecord(
            int(event_id), {}, functools.partial(_write_scores, scores=values), values.nbytes
        )
        for event_id, values in scores
    )
    return _write_event_groups(path, SCORES_FORMAT, provenance, items)


def _write_scores(group: h5py.Group, *, scores: np.ndarray) -> None:
    write_array(group, "scores", np.asarray(scores, dtype=np.float32))


class ScoresFile(_EventStore):
    """Reads per-event edge scores written by :func:`write_scores` (``partgnn infer``)."""

    expected_format = SCORES_FORMAT

    def __getitem__(self, index: int) -> np.ndarray:
        key, group = self._group(index)
        try:
            scores = read_array(group, "scores")
        except (KeyError, OSError) as err:
            raise InputError(f"{self.path}: {key} is unreadable ({first_line(err)})") from None
        if scores.ndim != 1 or not bool(((scores >= 0) & (scores <= 1)).all()):
            raise InputError(
                f"{self.path}: {group.name}/scores holds values outside [0, 1] (or NaN)"
            )
        return scores


def open_store(path: str | os.PathLike[str]) -> EventFile | GraphFile | ScoresFile:
    """Opens a partgnn HDF5 file as an :class:`EventFile`, a :class:`GraphFile` or a
    :class:`ScoresFile`, by its format.

    Raises:
        InputError: If the file is missing, unreadable, or of neither format.
    """
    probe = LazyH5File(Path(path))
    try:
        with damaged_file_errors(Path(path)):
            fmt = decode_attr(probe.get().attrs.get("format"))
    finally:
        probe.close()
    readers = {EVENTS_FORMAT: EventFile, GRAPHS_FORMAT: GraphFile, SCORES_FORMAT: ScoresFile}
    if fmt not in readers:
        raise InputError(f"{path}: neither a partgnn events nor a graphs file (format {fmt!r})")
    return readers[fmt](path)


class GraphDataset(torch.utils.data.Dataset):
    """A torch ``Dataset`` of event graphs, read lazily from a graphs file.

    Safe with ``DataLoader(num_workers > 0)``: every worker opens its own HDF5 handle.

    Args:
        path: Graphs file written by ``partgnn build-graphs``.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.graphs = GraphFile(path)

    def __len__(self) -> int:
        return len(self.graphs)

    def __getitem__(self, index: int) -> Data:
        return self.graphs[index]
