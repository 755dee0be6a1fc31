"""HDF5 storage of events and event graphs: atomic writes, lazy per-event reads.

Schema (format version 2; every kind of file shares the layout, see ``docs/DATA_FORMAT.md``)::

    /                         attrs: format ("partgnn-events" | "partgnn-graphs"),
                                     format_version, partgnn_version, created, provenance...
    /events/event000000001/   attrs: event_id and per-event provenance or quality
        hits/<column>         (events files) one 1-D dataset per TrackML column
        truth/<column>
        particles/<column>
        x, pos, edge_index... (graphs files) one dataset per graph field

Files are written under a temporary name in the target's folder and renamed into place only when
complete, so a crash never leaves a half-written file under the final name.

Integrity: every dataset carries a Fletcher-32 checksum that HDF5 verifies on every read
(:func:`read_array` turns a mismatch into one line naming the file and the dataset), and the
files use the HDF5 1.10 object format (:data:`LIBVER`), whose object headers, and so the
attributes, carry checksums too; strings are stored fixed-length, in the header, rather than in
the unchecked global heap.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
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
from partgnn.data.output_files import SpaceGuard, atomic_output
from partgnn.errors import InputError, first_line
from partgnn.version import __version__

T = TypeVar("T")

#: 2: every dataset checksummed (Fletcher-32), checksummed object headers (:data:`LIBVER`).
FORMAT_VERSION = 2

#: HDF5 file format bounds of the files partgnn writes: 1.10's object headers carry checksums.
LIBVER = ("v110", "v110")
EVENTS_FORMAT = "partgnn-events"
GRAPHS_FORMAT = "partgnn-graphs"
SCORES_FORMAT = "partgnn-scores"

#: Graph fields with one row per node and per edge.
NODE_FIELDS = ("x", "pos", "hit_id", "particle_id", "particle_pt", "layer")
EDGE_FIELDS = ("edge_attr", "y", "edge_pt")

#: Graph fields stored per event, with the dtype they are stored in. ``y`` is stored as uint8
#: and read back as float32.
GRAPH_FIELDS: dict[str, np.dtype] = {
    "x": np.dtype(np.float32),
    "pos": np.dtype(np.float32),
    "edge_index": np.dtype(np.int64),
    "edge_attr": np.dtype(np.float32),
    "y": np.dtype(np.uint8),
    "edge_pt": np.dtype(np.float32),
    "hit_id": np.dtype(np.int64),
    "particle_id": np.dtype(np.int64),
    "particle_pt": np.dtype(np.float32),
    "layer": np.dtype(np.int64),
}

#: Group of an event's graph holding fields kept from where the graph came from.
EXTRA_GROUP = "extra"

#: Fields kept beside a graph: name -> array.
Extra = dict[str, np.ndarray]

# Below this many elements compression costs more than it saves.
_COMPRESS_MIN_ELEMENTS = 1024


def event_key(event_id: int) -> str:
    """Group name of an event: TrackML style, ``event000000001``."""
    return f"event{int(event_id):09d}"


def file_sha256(path: str | os.PathLike[str], chunk_bytes: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes, read in chunks (for provenance of derived files)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


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
            nbytes = sum(int(getattr(event, t).memory_usage(index=False).sum()) for t in TABLES)
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
    for table_name, columns in TABLES.items():
        table = getattr(event, table_name)
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
        write_root_attrs(h5, fmt, provenance)
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


class LazyH5File:
    """An HDF5 file opened read-only on first use, and again in every process that uses it.

    h5py handles must not cross a fork (DataLoader workers, multiprocessing), so the handle is
    reopened when the process id changes; pickling drops it.

    Args:
        path: The file.
        missing: What the error says when the file does not exist (``"file not found"``).
    """

    def __init__(self, path: Path, missing: str = "file not found") -> None:
        self.path = path
        self.missing = missing
        self._file: h5py.File | None = None
        self._pid: int | None = None

    def get(self) -> h5py.File:
        if self._file is None or self._pid != os.getpid():
            if not self.path.exists():
                raise InputError(f"{self.path}: {self.missing}")
            try:
                self._file = h5py.File(self.path, "r")
            except OSError as err:
                raise InputError(
                    f"{self.path}: not a readable HDF5 file ({first_line(err)})"
                ) from None
            self._pid = os.getpid()
        return self._file

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_file": None, "_pid": None}


class EventShape(NamedTuple):
    """Sizes of one stored event graph, read from the file's index (nothing decoded).

    Attributes:
        nodes: Node rows (for a rank's shard: owned plus halo).
        edges: Edges.
        halo: Halo nodes among ``nodes`` (0 for a whole graph).
        nbytes: Bytes of all the event's arrays once decoded.
    """

    nodes: int
    edges: int
    halo: int
    nbytes: int


@contextlib.contextmanager
def damaged_file_errors(path: Path, where: str = "") -> Iterator[None]:
    """Turns the errors h5py raises on a damaged file (a header failing its checksum, an index
    that cannot be decoded) into one-line InputErrors naming the file (and event)."""
    try:
        yield
    except (KeyError, OSError, ValueError, RuntimeError) as err:
        place = f"{path}: {where}" if where else f"{path}"
        raise InputError(
            f"{place}: damaged HDF5 structure ({first_line(err).strip(chr(39))}; the file is "
            "corrupted)"
        ) from None


def group_nbytes(group: h5py.Group) -> int:
    """Decoded bytes of every dataset under an HDF5 group (sizes from the index alone), but for
    the kept fields of :data:`EXTRA_GROUP`, which training never decodes."""
    total = 0

    def add(name: str, obj: object) -> None:
        nonlocal total
        if isinstance(obj, h5py.Dataset) and name.split("/")[0] != EXTRA_GROUP:
            total += int(obj.size) * obj.dtype.itemsize

    group.visititems(add)
    return total


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
        self.keys: list[str] = sorted(h5["events"].keys())
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
            attrs = {k: decode_attr(v) for k, v in group.attrs.items() if k != "event_id"}
            event = Event(event_id=int(group.attrs["event_id"]), attrs=attrs, **tables)
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
    """Opens a partgnn HDF5 file as an :class:`EventFile` or a :class:`GraphFile`, by its format.

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


def check_graph(graph: Data, *, where: str) -> None:
    """Raises a one-line InputError (prefixed ``where``) unless the graph's fields agree: 2-D
    ``x`` and ``edge_attr``, ``edge_index`` ``(2, E)`` within its nodes, one row per node or
    edge in every field, finite features and labels 0 or 1."""
    for name in ("x", "edge_attr"):
        if graph[name].dim() != 2:
            raise InputError(
                f"{where}: {name} must be a 2-D table, got shape {tuple(graph[name].shape)}"
            )
    n_nodes = graph.x.shape[0]
    edge_index = graph.edge_index
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise InputError(
            f"{where}: edge_index must have shape (2, E), got {tuple(edge_index.shape)}"
        )
    if edge_index.numel() and (edge_index.min() < 0 or edge_index.max() >= n_nodes):
        raise InputError(f"{where}: edge_index refers to nodes outside 0..{n_nodes - 1}")
    n_edges = edge_index.shape[1]
    for name in EDGE_FIELDS:
        if graph[name].shape[0] != n_edges:
            raise InputError(f"{where}: {name} has {graph[name].shape[0]} rows, expected {n_edges}")
    for name in NODE_FIELDS:
        if graph[name].shape[0] != n_nodes:
            raise InputError(f"{where}: {name} has {graph[name].shape[0]} rows, expected {n_nodes}")
    for name in ("x", "edge_attr", "pos"):
        finite = torch.isfinite(graph[name])
        if not finite.all():
            raise InputError(f"{where}: {name} holds NaN or inf ({int((~finite).sum())} values)")
    check_labels(graph.y, where=where)


def check_labels(y: torch.Tensor, *, where: str) -> None:
    """Raises a one-line InputError unless every edge label ``y`` ``(E,)`` is 0 or 1."""
    bad = (y != 0) & (y != 1)
    if bool(bad.any()):
        first = int(torch.nonzero(bad)[0, 0])
        raise InputError(f"{where}: edge label y = {y[first].item()} at edge {first} is not 0 or 1")


def write_root_attrs(
    h5: h5py.File,
    fmt: str,
    provenance: dict[str, object] | None,
    *,
    version: int = FORMAT_VERSION,
    timestamp: bool = True,
) -> None:
    """Writes the common root attributes (format, version, provenance) of a partgnn file.

    ``timestamp=False`` leaves out the creation time, for files that must be reproducible.
    """
    common: dict[str, object] = {
        "format": fmt,
        "format_version": version,
        "partgnn_version": __version__,
    }
    if timestamp:
        common["created"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    write_attrs(h5, {**common, **(provenance or {})})


def create_h5(path: str | os.PathLike[str]) -> h5py.File:
    """A new HDF5 file in the checksummed object format (:data:`LIBVER`), open for writing."""
    return h5py.File(path, "w", libver=LIBVER)


def write_attrs(obj: h5py.HLObject, attrs: dict[str, object]) -> None:
    """Stores numbers as they are and anything else as a fixed-length UTF-8 string (JSON for
    what is not a string), which lives in the checksummed object header."""
    for key, value in attrs.items():
        if isinstance(value, (bool, int, float, np.integer, np.floating)):
            obj.attrs[key] = value
        else:
            text = (
                value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
            )
            encoded = text.encode()
            obj.attrs.create(
                key, np.array(encoded), dtype=h5py.string_dtype("utf-8", max(1, len(encoded)))
            )


def write_array(group: h5py.Group, name: str, array: np.ndarray) -> None:
    """Writes a dataset with a Fletcher-32 checksum, compressed when that pays (the checksum
    covers the stored, compressed bytes)."""
    options = {}
    if array.size >= _COMPRESS_MIN_ELEMENTS:
        options = {"compression": "gzip", "compression_opts": 4, "shuffle": True}
    group.create_dataset(name, data=np.ascontiguousarray(array), fletcher32=True, **options)


def read_array(group: h5py.Group, name: str) -> np.ndarray:
    """A dataset's values, its checksum verified (HDF5 checks Fletcher-32 on every read).

    Raises:
        InputError: One line naming the file and the dataset when it is missing, fails its
            checksum or cannot be decoded.
    """
    path = f"{group.name.rstrip('/')}/{name}"
    try:
        dataset = group[name]
    except KeyError:
        raise InputError(f"{group.file.filename}: dataset {path} is missing") from None
    try:
        return dataset[()]
    except OSError:
        raise InputError(
            f"{group.file.filename}: dataset {path} fails its checksum or cannot be decoded "
            "(the file is corrupted)"
        ) from None


def decode_attr(value: object) -> object:
    """An HDF5 attribute as a plain Python value (bytes -> str, numpy scalar -> item)."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.generic):
        return value.item()
    return value
