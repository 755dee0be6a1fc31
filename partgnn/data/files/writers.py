"""Writing partgnn's HDF5 files (:mod:`partgnn.data.files.storage` is their schema and reading):
events, graphs and scores files, each written whole under a temporary name and renamed into
place when complete, every dataset checksummed, each event's group in the order the events
come."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

import h5py
import numpy as np
import torch
from torch_geometric.data import Data

from partgnn.data.event import TABLES, Event
from partgnn.data.files.h5_files import (
    EXTRA_GROUP,
    create_h5,
    event_key,
    write_array,
    write_attrs,
    write_root_attrs,
)
from partgnn.data.files.output_files import SpaceGuard, atomic_output
from partgnn.data.files.storage import (
    CLUSTERS_TABLE,
    EVENTS_FORMAT,
    FORMAT_VERSION,
    GRAPHS_FORMAT,
    SCORES_FORMAT,
    Extra,
)
from partgnn.data.formats.cluster_shapes import CLUSTER_COLUMNS
from partgnn.data.graphs.graph_fields import (
    GRAPH_FIELDS,
)
from partgnn.errors import InputError


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
