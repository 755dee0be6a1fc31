"""Pre-split datasets on disk: one HDF5 shard per rank plus ``meta.json``.

``partgnn partition graphs.h5 --parts P --method M --out DIR`` writes::

    DIR/meta.json          format, version, method, P, seed, margin, source file and its
                           SHA-256, event ids, partition statistics (per event and mean)
    DIR/part-00000.h5      rank 0's share of every event: its local subgraph and halo plan
    DIR/part-00001.h5      ...

so that a rank reads only its own file. Each shard event group holds the node fields of the
rank's local nodes (owned, then halo; see :mod:`partgnn.partition.halo_plan`), the edge fields
of its local edges, and the plan arrays; with ``margin > 0`` also a ``sector/`` sub-group with an
extended naive sector (:func:`~partgnn.partition.naive.extended_sector`).

Output is reproducible: the same input and options give byte-identical files. The directory
appears complete or not at all (it is built under a temporary name and renamed).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import h5py
import numpy as np
import torch
from torch_geometric.data import Data
from tqdm import tqdm

import partgnn
from partgnn.data.storage import (
    EDGE_FIELDS,
    GRAPH_FIELDS,
    GRAPHS_FORMAT,
    NODE_FIELDS,
    GraphFile,
    LazyH5File,
    current_umask,
    decode_attr,
    event_key,
    file_sha256,
    write_array,
    write_root_attrs,
)
from partgnn.errors import InputError, first_line
from partgnn.partition.assign import METHODS, partition_graph
from partgnn.partition.halo_plan import HaloPlan, build_halo_plans, validate_plans
from partgnn.partition.naive import extended_sector
from partgnn.partition.statistics import (
    DEFAULT_HIDDEN,
    PartitionStatistics,
    partition_statistics,
    summarize,
)

T = TypeVar("T")

SHARDS_FORMAT = "partgnn-shards"
SHARD_FORMAT = "partgnn-shard"
SHARDS_FORMAT_VERSION = 1
META_FILE = "meta.json"

_PLAN_ARRAYS = ("owned_nodes", "halo_nodes", "halo_counts", "edge_ids", "send_index", "send_counts")
_SECTOR_ARRAYS = ("nodes", "edge_ids")


def shard_path(directory: str | os.PathLike[str], rank: int) -> Path:
    """Path of rank ``rank``'s shard file in a shard directory."""
    return Path(directory) / f"part-{rank:05d}.h5"


@dataclass(frozen=True)
class PartitionOptions:
    """How ``partgnn partition`` splits every event.

    Attributes:
        n_parts: Number of parts ``P`` (ranks of one graph-parallel group), >= 1.
        method: One of :data:`~partgnn.partition.assign.METHODS`.
        seed: Seed of the partitioner.
        grid: ``(n_phi, n_eta)`` sectors for ``method="phieta"`` (default: chosen from P).
        margin: Hops of the extended naive sector stored beside the plan (0: none stored; the
            naive sector is then the plan's owned nodes and interior edges).
        hidden: Hidden size used to quote bytes per exchange in the statistics.
    """

    n_parts: int
    method: str = "metis"
    seed: int = 0
    grid: tuple[int, int] | None = None
    margin: int = 0
    hidden: int = DEFAULT_HIDDEN

    def check(self) -> None:
        if self.n_parts < 1:
            raise InputError(f"parts must be >= 1 (got {self.n_parts})")
        if self.method not in METHODS:
            raise InputError(
                f"unknown partition method {self.method!r} (choose {', '.join(METHODS)})"
            )
        if self.margin < 0:
            raise InputError(f"margin must be >= 0 hops (got {self.margin})")


@dataclass(frozen=True)
class _SplitEvent:
    """One event split for all ranks, as plain arrays: what a worker hands the writer.

    ``ranks[r]`` maps a dataset path inside the event group (``"x"``, ``"plan/send_index"``,
    ``"sector/edge_index"``...) to its array; ``group_attrs`` maps a group path (``""`` for
    the event group) to its attributes, the same for every rank except the sector's.
    """

    event_id: int
    ranks: list[dict[str, np.ndarray]]
    group_attrs: list[dict[str, dict[str, int]]]
    statistics: PartitionStatistics


def write_shards(
    graphs_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    options: PartitionOptions,
    *,
    workers: int = 1,
    progress: bool = True,
) -> dict[str, object]:
    """Partitions every event of a graphs file and writes one shard per rank plus meta.json.

    Events stream through (at most a few in memory); with ``workers > 1`` they are split in
    worker processes while the main process writes in event order.

    Args:
        graphs_path: Graphs file from ``partgnn build-graphs``.
        out_dir: Output directory. An existing shard directory there is replaced; any other
            non-empty directory is refused.
        options: Partitioning options.
        workers: Processes that split events.
        progress: Show a progress bar.

    Returns:
        The content of ``meta.json``.

    Raises:
        InputError: On bad options or input, or an output directory that is not a shard one.
    """
    options.check()
    graphs_path, out_dir = Path(graphs_path), Path(out_dir)
    with GraphFile(graphs_path) as graphs:
        n_events, event_ids = len(graphs), graphs.event_ids
    _check_replaceable(out_dir)
    meta: dict[str, object] = {
        "format": SHARDS_FORMAT,
        "format_version": SHARDS_FORMAT_VERSION,
        "partgnn_version": partgnn.__version__,
        "method": options.method,
        "n_parts": options.n_parts,
        "seed": options.seed,
        "grid": list(options.grid) if options.grid else None,
        "margin": options.margin,
        "source": {
            "path": str(graphs_path.resolve()),
            "sha256": file_sha256(graphs_path),
            "format": GRAPHS_FORMAT,
            "n_events": n_events,
        },
        "event_ids": event_ids,
    }
    root_attrs = {
        "n_parts": options.n_parts,
        "method": options.method,
        "source_sha256": meta["source"]["sha256"],
    }
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        files = [h5py.File(shard_path(staging, rank), "w") for rank in range(options.n_parts)]
        try:
            for rank, h5 in enumerate(files):
                write_root_attrs(
                    h5,
                    SHARD_FORMAT,
                    {**root_attrs, "rank": rank},
                    version=SHARDS_FORMAT_VERSION,
                    timestamp=False,
                )
                h5.create_group("events")
            statistics: list[PartitionStatistics] = []
            split_events = _split_all(graphs_path, n_events, options, workers)
            for split in tqdm(
                split_events, total=n_events, desc="partition", unit="event", disable=not progress
            ):
                for rank, h5 in enumerate(files):
                    _write_rank_event(h5["events"], split, rank)
                statistics.append(split.statistics)
        finally:
            for h5 in files:
                h5.close()
        meta["statistics"] = {
            "summary": summarize(statistics, options.hidden),
            "per_event": [
                {"event_id": event_id, **stats.to_dict(options.hidden)}
                for event_id, stats in zip(event_ids, statistics, strict=True)
            ],
        }
        (staging / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        staging.chmod(0o777 & ~current_umask())
        _replace_directory(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return meta


def split_event(graph: Data, options: PartitionOptions) -> _SplitEvent:
    """Partitions one event graph, builds and validates every rank's plan, gathers its data."""
    edge_index = graph.edge_index.numpy()
    assignment = partition_graph(
        graph, options.n_parts, options.method, seed=options.seed, grid=options.grid
    )
    plans = build_halo_plans(edge_index, assignment, options.n_parts)
    validate_plans(plans, edge_index, assignment)
    fields = {name: _field(graph, name) for name in (*NODE_FIELDS, *EDGE_FIELDS)}
    y = fields["y"]
    event_attrs = {
        "event_id": int(graph.event_id),
        "n_global_nodes": int(graph.num_nodes),
        "n_global_edges": int(edge_index.shape[1]),
        "n_global_true_edges": int((y > 0).sum()),
    }
    plan_attrs = {
        "n_global_nodes": int(graph.num_nodes),
        "n_global_edges": event_attrs["n_global_edges"],
    }
    ranks, group_attrs = [], []
    for plan in plans:
        arrays = _subgraph_arrays(fields, plan.local_nodes, plan.edge_ids, "")
        arrays.update({f"plan/{name}": getattr(plan, name) for name in _PLAN_ARRAYS})
        arrays["edge_index"] = plan.edge_index
        arrays["edge_owned"] = plan.edge_owned.astype(np.uint8)
        attrs = {"": event_attrs, "plan": plan_attrs}
        if options.margin > 0:
            sector = extended_sector(
                edge_index, assignment, plan.rank, options.margin, options.n_parts
            )
            arrays.update(_subgraph_arrays(fields, sector.nodes, sector.edge_ids, "sector/"))
            arrays.update({f"sector/{name}": getattr(sector, name) for name in _SECTOR_ARRAYS})
            arrays["sector/edge_index"] = sector.edge_index
            arrays["sector/edge_owned"] = sector.edge_owned.astype(np.uint8)
            attrs["sector"] = {"n_owned": sector.n_owned}
        ranks.append(arrays)
        group_attrs.append(attrs)
    return _SplitEvent(
        event_id=event_attrs["event_id"],
        ranks=ranks,
        group_attrs=group_attrs,
        statistics=partition_statistics(plans, edge_index, y),
    )


@dataclass(frozen=True)
class RankEvent:
    """One event as one rank sees it.

    Attributes:
        event_id: The event id.
        plan: The rank's halo plan.
        graph: The rank's local graph: node fields of its local nodes (owned, then halo), edge
            fields and local ``edge_index`` of its local edges, ``event_id``.
        sector: The extended naive sector graph (same fields) if the shards hold one, with
            ``edge_owned`` and ``n_owned``; else ``None`` (use the plan's interior edges).
        n_global_nodes: Nodes of the whole event graph.
        n_global_edges: Edges of the whole event graph (a loss normaliser).
        n_global_true_edges: True edges of the whole event graph (a loss normaliser).
    """

    event_id: int
    plan: HaloPlan
    graph: Data
    sector: Data | None
    n_global_nodes: int
    n_global_edges: int
    n_global_true_edges: int


class ShardDirectory:
    """A shard directory: its ``meta.json``, checked, and lazy access to one rank's shard.

    Args:
        directory: Output of ``partgnn partition``.
        world_size: If given, must equal the directory's number of parts.

    Raises:
        InputError: If meta.json is missing or malformed, of another format or version, or
            ``world_size`` differs from its P.
    """

    def __init__(self, directory: str | os.PathLike[str], world_size: int | None = None) -> None:
        self.directory = Path(directory)
        meta_path = self.directory / META_FILE
        if not self.directory.is_dir():
            raise InputError(f"{self.directory}: shard directory not found")
        try:
            self.meta = json.loads(meta_path.read_text())
        except FileNotFoundError:
            raise InputError(f"{meta_path}: missing (not a partgnn shard directory)") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise InputError(f"{meta_path}: not valid JSON ({first_line(err)})") from None
        if not isinstance(self.meta, dict) or self.meta.get("format") != SHARDS_FORMAT:
            raise InputError(f"{meta_path}: not a {SHARDS_FORMAT} description")
        version = self.meta.get("format_version")
        if version != SHARDS_FORMAT_VERSION:
            raise InputError(
                f"{meta_path}: format version {version}, this partgnn reads "
                f"{SHARDS_FORMAT_VERSION} (re-run partgnn partition)"
            )
        for key in ("n_parts", "method", "source", "event_ids", "margin"):
            if key not in self.meta:
                raise InputError(f"{meta_path}: lacks field {key!r}")
        self.n_parts = int(self.meta["n_parts"])
        if world_size is not None and world_size != self.n_parts:
            raise InputError(
                f"{self.directory}: shards are for {self.n_parts} ranks but the world size is "
                f"{world_size} (re-partition with --parts {world_size} or launch "
                f"{self.n_parts} processes)"
            )

    @property
    def source_sha256(self) -> str:
        return str(self.meta["source"]["sha256"])

    def check_source(self, graphs_path: str | os.PathLike[str]) -> None:
        """Raises InputError if the shards were not made from this graphs file."""
        if file_sha256(graphs_path) != self.source_sha256:
            raise InputError(
                f"{self.directory}: shards were made from another file than {graphs_path} "
                "(checksums differ; re-run partgnn partition)"
            )

    def open_rank(self, rank: int) -> ShardFile:
        """The lazy reader of rank ``rank``'s shard file."""
        if not 0 <= rank < self.n_parts:
            raise InputError(f"{self.directory}: rank {rank} not in [0, {self.n_parts})")
        return ShardFile(shard_path(self.directory, rank), self)


class ShardFile:
    """Lazy per-event reader of one rank's shard file (checked against meta.json)."""

    def __init__(self, path: Path, directory: ShardDirectory) -> None:
        self.path = path
        self.directory = directory
        self._h5 = LazyH5File(path, missing="shard file missing")
        attrs = self._h5.get().attrs
        expected = {
            "format": SHARD_FORMAT,
            "format_version": SHARDS_FORMAT_VERSION,
            "n_parts": directory.n_parts,
            "source_sha256": directory.source_sha256,
        }
        for key, value in expected.items():
            found = decode_attr(attrs.get(key))
            if found != value:
                raise InputError(
                    f"{path}: {key} is {found!r} but meta.json says {value!r} "
                    "(shard from another partition run?)"
                )
        self.rank = int(attrs["rank"])
        self.keys = [event_key(event_id) for event_id in directory.meta["event_ids"]]
        missing = [key for key in self.keys if key not in self._h5.get()["events"]]
        if missing:
            raise InputError(f"{path}: lacks event {missing[0]} listed in meta.json")

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, index: int) -> RankEvent:
        return self._read(index, lambda group: _read_rank_event(group, self.rank))

    def __iter__(self) -> Iterator[RankEvent]:
        for index in range(len(self)):
            yield self[index]

    def edge_ids(self, index: int) -> np.ndarray:
        """Global ids of the rank's local edges of event ``index``, ``(E_local,)``, read alone
        (no node or edge fields decoded)."""
        return self._read(index, lambda group: group["plan"]["edge_ids"][()])

    def owned_nodes(self, index: int) -> np.ndarray:
        """Global ids of the rank's owned nodes of event ``index``, ``(n_owned,)``, read alone."""
        return self._read(index, lambda group: group["plan"]["owned_nodes"][()])

    def _read(self, index: int, reader: Callable[[h5py.Group], T]) -> T:
        """``reader`` applied to event ``index``'s group; a damaged group is a one-line error."""
        key = self.keys[index]
        try:
            return reader(self._h5.get()["events"][key])
        except (KeyError, OSError, ValueError) as err:
            raise InputError(f"{self.path}: {key} is unreadable ({first_line(err)})") from None

    def close(self) -> None:
        self._h5.close()

    def __enter__(self) -> ShardFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _split_all(
    graphs_path: Path, n_events: int, options: PartitionOptions, workers: int
) -> Iterator[_SplitEvent]:
    tasks = ((graphs_path, index, options) for index in range(n_events))
    if workers <= 1 or n_events <= 1:
        yield from (_split_task(task) for task in tasks)
        return
    # Spawned workers: no inherited h5py handles or torch thread pools.
    context = multiprocessing.get_context("spawn")
    with context.Pool(min(workers, n_events), initializer=_init_worker) as pool:
        yield from pool.imap(_split_task, tasks)


def _init_worker() -> None:
    torch.set_num_threads(1)


_WORKER_GRAPHS: dict[Path, GraphFile] = {}


def _split_task(task: tuple[Path, int, PartitionOptions]) -> _SplitEvent:
    graphs_path, index, options = task
    if graphs_path not in _WORKER_GRAPHS:
        _WORKER_GRAPHS[graphs_path] = GraphFile(graphs_path)
    return split_event(_WORKER_GRAPHS[graphs_path][index], options)


def _write_rank_event(events_group: h5py.Group, split: _SplitEvent, rank: int) -> None:
    group = events_group.create_group(event_key(split.event_id))
    for path, attrs in split.group_attrs[rank].items():
        target = group.require_group(path) if path else group
        for key, value in attrs.items():
            target.attrs[key] = value
    for path, array in split.ranks[rank].items():
        folder, _, name = path.rpartition("/")
        write_array(group.require_group(folder) if folder else group, name, array)


def _subgraph_arrays(
    fields: dict[str, np.ndarray], nodes: np.ndarray, edges: np.ndarray, prefix: str
) -> dict[str, np.ndarray]:
    arrays = {f"{prefix}{name}": fields[name][nodes] for name in NODE_FIELDS}
    arrays.update({f"{prefix}{name}": fields[name][edges] for name in EDGE_FIELDS})
    return arrays


def _field(graph: Data, name: str) -> np.ndarray:
    return graph[name].numpy().astype(GRAPH_FIELDS[name], copy=False)


def _read_rank_event(group: h5py.Group, rank: int) -> RankEvent:
    plan_group = group["plan"]
    arrays = {name: plan_group[name][()] for name in _PLAN_ARRAYS}
    edge_index = group["edge_index"][()]
    edge_owned = group["edge_owned"][()].astype(bool)
    plan = HaloPlan(
        rank=rank,
        n_parts=int(arrays["halo_counts"].shape[0]),
        n_global_nodes=int(plan_group.attrs["n_global_nodes"]),
        n_global_edges=int(plan_group.attrs["n_global_edges"]),
        edge_index=edge_index,
        edge_owned=edge_owned,
        **arrays,
    )
    event_id = int(group.attrs["event_id"])
    graph = _read_subgraph(group, edge_index, event_id)
    sector = None
    if "sector" in group:
        sector_group = group["sector"]
        sector = _read_subgraph(sector_group, sector_group["edge_index"][()], event_id)
        sector.edge_owned = torch.from_numpy(sector_group["edge_owned"][()].astype(bool))
        sector.n_owned = int(sector_group.attrs["n_owned"])
        sector.global_nodes = torch.from_numpy(sector_group["nodes"][()])
        sector.global_edges = torch.from_numpy(sector_group["edge_ids"][()])
    return RankEvent(
        event_id=event_id,
        plan=plan,
        graph=graph,
        sector=sector,
        n_global_nodes=int(group.attrs["n_global_nodes"]),
        n_global_edges=int(group.attrs["n_global_edges"]),
        n_global_true_edges=int(group.attrs["n_global_true_edges"]),
    )


def _read_subgraph(group: h5py.Group, edge_index: np.ndarray, event_id: int) -> Data:
    fields = {name: torch.from_numpy(group[name][()]) for name in (*NODE_FIELDS, *EDGE_FIELDS)}
    fields["y"] = fields["y"].to(torch.float32)
    graph = Data(edge_index=torch.from_numpy(edge_index), event_id=event_id, **fields)
    graph.num_nodes = fields["x"].shape[0]
    return graph


def _check_replaceable(out_dir: Path) -> None:
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise InputError(f"{out_dir}: exists and is not a directory")
    if any(out_dir.iterdir()) and not (out_dir / META_FILE).exists():
        raise InputError(f"{out_dir}: a non-empty directory that is not a shard directory")


def _replace_directory(staging: Path, out_dir: Path) -> None:
    if out_dir.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old.", dir=out_dir.parent))
        old.rmdir()
        out_dir.rename(old)
        staging.rename(out_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        staging.rename(out_dir)


def cut_edges(shards: ShardDirectory, index: int, n_edges: int) -> np.ndarray:
    """Mask ``(E,)`` of the global edges of event ``index`` that the shards' partition cuts.

    Reads every rank's edge ids (only those): a cut edge is held by two ranks.
    """
    holders = np.zeros(n_edges, dtype=np.int64)
    for rank in range(shards.n_parts):
        with shards.open_rank(rank) as shard:
            holders[shard.edge_ids(index)] += 1
    return holders > 1


def node_parts(shards: ShardDirectory, index: int, n_nodes: int) -> np.ndarray:
    """Part (owning rank) of every global node of event ``index``, ``(N,)`` int64.

    Reads every rank's owned node ids (only those).

    Raises:
        InputError: If the owned nodes of the ranks do not cover ``n_nodes`` nodes exactly once
            (the shards belong to another graph).
    """
    parts = np.full(n_nodes, -1, dtype=np.int64)
    for rank in range(shards.n_parts):
        with shards.open_rank(rank) as shard:
            owned = shard.owned_nodes(index)
            if owned.size and (owned.max() >= n_nodes or (parts[owned] >= 0).any()):
                raise InputError(
                    f"{shards.directory}: event index {index}: the ranks' owned nodes do not "
                    f"partition {n_nodes} nodes"
                )
            parts[owned] = rank
    if (parts < 0).any():
        raise InputError(
            f"{shards.directory}: event index {index}: {int((parts < 0).sum())} of {n_nodes} "
            "nodes are owned by no rank"
        )
    return parts
