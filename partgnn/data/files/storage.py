"""HDF5 storage of events and event graphs: the schema, and lazy per-event reads (the writing is
:mod:`partgnn.data.files.writers`).

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

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import h5py
import numpy as np
import pandas as pd
import torch
from torch_geometric.data import Data

from partgnn.data.event import TABLES, Event
from partgnn.data.files.h5_files import (
    EXTRA_GROUP,
    LazyH5File,
    damaged_file_errors,
    decode_attr,
    group_nbytes,
    read_array,
)
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
