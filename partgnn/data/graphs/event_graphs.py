"""The event graphs of an events file, built event by event on one or more processes: what
``partgnn build-graphs`` writes, with each event's construction quality, with a module map how
many of its hits lie on modules the map never saw, and for events with cells their nodes'
cluster features kept beside each graph (a model reads them by name: ``data.node_features``)."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from torch_geometric.data import Data

from partgnn.data.detector.detector_modules import detector_modules
from partgnn.data.detector.geometry import DetectorGeometry
from partgnn.data.event import Event
from partgnn.data.files.storage import EventFile
from partgnn.data.formats.cluster_shapes import (
    CLUSTER_FEATURES,
    cluster_features,
    hit_modules,
    rows_of_ids,
)
from partgnn.data.graphs.graph_builder import build_event_graph
from partgnn.data.graphs.graph_config import GraphBuildConfig
from partgnn.data.module_map.map_file import ModuleMap, check_map_file, module_keys
from partgnn.errors import InputError
from partgnn.worker_pool import ordered_map


@dataclass(frozen=True)
class EventGraph:
    """One event's graph as :func:`event_graphs` builds it.

    Attributes:
        graph: The graph (:func:`~partgnn.data.graphs.graph_builder.build_event_graph`'s ``data``).
        quality: Its construction quality (:class:`~partgnn.data.graphs.graph_builder.GraphQuality`
            as a dict) and ``seconds``, the time its construction took.
        hits: The event's hits.
        unmapped_hits: Of them, those on modules the module map never saw (0 without a map).
        kept: Per-node fields kept beside the graph: the cluster features of its hits
            (:data:`~partgnn.data.formats.cluster_shapes.CLUSTER_FEATURES`, ``(N,)`` float32 each)
            for an event with cells, else empty.
    """

    graph: Data
    quality: dict[str, float]
    hits: int
    unmapped_hits: int
    kept: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)


def event_graphs(
    events_path: str | os.PathLike[str],
    geometry: DetectorGeometry,
    config: GraphBuildConfig,
    map_path: str | os.PathLike[str] | None = None,
    *,
    workers: int = 1,
) -> Iterator[EventGraph]:
    """Builds the graph of every event of an events file, in the file's order.

    Args:
        events_path: Events file (``partgnn simulate`` or ``import-trackml``).
        geometry: The detector.
        config: Cuts (resolved for the geometry's field).
        map_path: Build by this module map instead of the geometric cuts.
        workers: Processes building graphs side by side (each loads the map once); the graphs
            are the same for any number.

    Yields:
        One :class:`EventGraph` per event.
    """
    map_path = None if map_path is None else Path(map_path)
    loaded = ModuleMap.load(map_path) if map_path is not None and workers <= 1 else None
    with EventFile(events_path) as events:
        task = _EventGraphTask(events, geometry, config, map_path, loaded)
        yield from ordered_map(task, range(len(events)), n_items=len(events), workers=workers)


#: The module map a worker process loaded: path -> map (one entry; workers build from one map).
_WORKER_MAPS: dict[Path, ModuleMap] = {}


@dataclass(frozen=True)
class _EventGraphTask:
    """The graph of event ``index`` (picklable for worker processes, which open the events file
    and load the map from ``map_path`` once each; in this process the ``loaded`` map is used)."""

    events: EventFile
    geometry: DetectorGeometry
    config: GraphBuildConfig
    map_path: Path | None
    loaded: ModuleMap | None = None

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "loaded": None}  # workers load the map themselves

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)

    def __call__(self, index: int) -> EventGraph:
        event = self.events[index]  # the file is opened once per process (LazyH5File)
        module_map = self._module_map()
        unmapped = 0
        if module_map is not None:
            hits = event.hits
            layer = self.geometry.layer_index(
                hits["volume_id"].to_numpy(), hits["layer_id"].to_numpy(), where=event.name
            )
            unmapped = module_map.unmapped_hits(module_keys(layer, hits["module_id"].to_numpy()))
        start = time.perf_counter()
        graph, quality = build_event_graph(event, self.geometry, self.config, module_map)
        seconds = time.perf_counter() - start
        return EventGraph(
            graph,
            {**quality.to_dict(), "seconds": seconds},
            len(event.hits),
            int(unmapped),
            node_clusters(event, self.geometry, graph.hit_id.numpy()),
        )

    def _module_map(self) -> ModuleMap | None:
        if self.loaded is not None or self.map_path is None:
            return self.loaded
        if self.map_path not in _WORKER_MAPS:
            _WORKER_MAPS.clear()
            _WORKER_MAPS[self.map_path] = ModuleMap.load(self.map_path)
        return _WORKER_MAPS[self.map_path]


def node_clusters(
    event: Event, geometry: DetectorGeometry, hit_id: np.ndarray
) -> dict[str, np.ndarray]:
    """The cluster features (:data:`~partgnn.data.formats.cluster_shapes.CLUSTER_FEATURES`) of the
    hits ``hit_id`` ``(N,)`` of ``event`` (the nodes of its graph), one ``(N,)`` float32 array
    each; empty for an event without cells.

    Raises:
        InputError: An event with cells on a geometry whose module table gives no thickness
            and pitch, or lacks a hit's module (one line naming the event).
    """
    if event.clusters is None:
        return {}
    modules = detector_modules(geometry)
    if modules is None or not modules.has_readout:
        raise InputError(
            f"{event.name}: its hits have cells, but geometry {geometry.name!r} has no module "
            "table with thickness and pitch to read them on (build with the geometry the events "
            "were made with)"
        )
    rows = rows_of_ids(hit_id, event.hits["hit_id"].to_numpy())
    hits = event.hits.iloc[rows]
    layer = geometry.layer_index(
        hits["volume_id"].to_numpy(), hits["layer_id"].to_numpy(), where=event.name
    )
    on = hit_modules(
        modules, layer, hits["module_id"].to_numpy(np.int64), where=event.name, hit_id=hit_id
    )
    features = cluster_features(event.clusters.iloc[rows], on)
    return {name: features[name].to_numpy() for name in CLUSTER_FEATURES}


@dataclass
class GraphsWritten:
    """What :func:`write_event_graphs` wrote.

    Attributes:
        path: The graphs file.
        n_graphs: Graphs written.
        quality: Each event's construction quality, in the file's order (``event_id`` and the
            :class:`EventGraph` ``quality`` fields).
        hits: The events' hits.
        unmapped_hits: Of them, those on modules the module map never saw (0 without a map).
    """

    path: Path
    n_graphs: int
    quality: list[dict[str, float]]
    hits: int
    unmapped_hits: int

    @property
    def unmapped_share(self) -> float:
        """The share of the hits on modules the map never saw (no edge reaches them)."""
        return self.unmapped_hits / max(self.hits, 1)


def write_event_graphs(
    events_path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    geometry: DetectorGeometry,
    config: GraphBuildConfig,
    map_path: str | os.PathLike[str] | None = None,
    *,
    workers: int = 1,
    progress: bool = True,
) -> GraphsWritten:
    """Builds every event's graph (:func:`event_graphs`) and writes the graphs file ``out``
    (atomically) with its provenance: the events file and its checksum, the geometry, the cuts,
    the construction method and module map (path and checksum), the feature names.

    Raises:
        InputError: A missing or damaged events file or map, or an output that cannot be
            written (one line naming it).
    """
    from tqdm import tqdm

    from partgnn.data.files.h5_files import file_sha256
    from partgnn.data.files.storage import EVENTS_FORMAT
    from partgnn.data.files.writers import write_graphs
    from partgnn.data.graphs.graph_config import EDGE_FEATURES, NODE_FEATURES

    events_path = Path(events_path)
    with EventFile(events_path) as events:  # (a missing or damaged file: one line, here)
        n_events = len(events)
    if map_path is not None:
        check_map_file(map_path)  # (before any event is built)
    written = GraphsWritten(Path(out), 0, [], 0, 0)
    built = event_graphs(events_path, geometry, config, map_path, workers=workers)

    def graphs() -> Iterator[tuple[Data, dict[str, float], dict[str, np.ndarray]]]:
        shown = tqdm(built, total=n_events, desc="build-graphs", unit="event", disable=not progress)
        for built_graph in shown:
            written.unmapped_hits += built_graph.unmapped_hits
            written.hits += built_graph.hits
            written.quality.append(
                {"event_id": int(built_graph.graph.event_id), **built_graph.quality}
            )
            yield built_graph.graph, built_graph.quality, built_graph.kept

    provenance = {
        "source_file": str(events_path.resolve()),
        "source_sha256": file_sha256(events_path),
        "source_format": EVENTS_FORMAT,
        "geometry": geometry.name,
        "config": dataclasses.asdict(config),
        "method": "module-map" if map_path is not None else "geometric",
        **(
            {
                "module_map": str(Path(map_path).resolve()),
                "module_map_sha256": file_sha256(map_path),
            }
            if map_path is not None
            else {}
        ),
        "node_features": list(NODE_FEATURES),
        "edge_features": list(EDGE_FEATURES),
    }
    written.n_graphs = write_graphs(out, graphs(), provenance=provenance)
    return written
