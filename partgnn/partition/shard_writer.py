"""Writing pre-split datasets: partition every event of a graphs file into one shard per rank.

The layout is described in :mod:`partgnn.partition.shard_reader`. Output is reproducible: the
same input and options give byte-identical files. The directory appears complete or not at all
(it is built under a temporary name and renamed).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
from torch_geometric.data import Data
from tqdm import tqdm

from partgnn import json_files
from partgnn.data.files.h5_files import (
    create_h5,
    event_key,
    file_sha256,
    write_array,
    write_attrs,
    write_root_attrs,
)
from partgnn.data.files.output_files import SpaceGuard, atomic_directory
from partgnn.data.files.storage import GRAPHS_FORMAT, GraphFile
from partgnn.data.graphs.graph_fields import EDGE_FIELDS, GRAPH_FIELDS, NODE_FIELDS
from partgnn.errors import InputError
from partgnn.partition.assign import METHODS, partition_graph
from partgnn.partition.halo_plan import build_halo_plans, validate_plans
from partgnn.partition.naive import extended_sector
from partgnn.partition.shard_meta import (
    META_FILE,
    SHARDS_FORMAT_VERSION,
    EventPartition,
    PartitionSummary,
    ShardMeta,
    SourceGraphs,
    meta_checksum,
)
from partgnn.partition.shard_reader import (
    PLAN_ARRAYS,
    SECTOR_ARRAYS,
    SHARD_FORMAT,
    is_shard_directory_file,
    shard_path,
)
from partgnn.partition.statistics import (
    DEFAULT_HIDDEN,
    PartitionStatistics,
    partition_statistics,
    summarize,
)
from partgnn.version import __version__
from partgnn.worker_pool import ordered_map

#: Most parts one partition may have (a rank each; every shard file is open while writing).
MAX_PARTS = 4096


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
        if self.n_parts > MAX_PARTS:
            raise InputError(
                f"parts must be <= {MAX_PARTS} (got {self.n_parts}): one shard file and one "
                "rank per part"
            )
        if self.method not in METHODS:
            raise InputError(
                f"unknown partition method {self.method!r} (choose {', '.join(METHODS)})"
            )
        if self.margin < 0:
            raise InputError(f"margin must be >= 0 hops (got {self.margin})")


def check_parts_fit(graphs_path: str | os.PathLike[str], n_parts: int) -> None:
    """Refuses more parts than the smallest non-empty event of a graphs file has nodes (parts
    would be left empty; ``partgnn partition`` asks this, :func:`write_shards` copes), and a
    graphs file none of whose events has an edge (nothing to partition).

    Raises:
        InputError: One line naming the file, the event and its node count.
    """
    with GraphFile(graphs_path) as graphs:
        shapes = [(graphs.shape(i), event) for i, event in enumerate(graphs.event_ids)]
    if shapes and not any(shape.edges for shape, _ in shapes):
        nodes = sum(shape.nodes for shape, _ in shapes)
        raise InputError(
            f"{graphs_path}: no event has an edge ({len(shapes)} events, {nodes:,} nodes): "
            "nothing to partition; build the graphs again with cuts that select hit pairs"
        )
    sizes = [(shape.nodes, event) for shape, event in shapes]
    sizes = [size for size in sizes if size[0] > 0]
    if sizes and n_parts > min(sizes)[0]:
        nodes, event_id = min(sizes)
        raise InputError(
            f"{graphs_path}: --parts {n_parts} is more than the {nodes} nodes of event "
            f"{event_id} (its smallest): parts would be left empty"
        )


def _allow_open_files(n_parts: int) -> None:
    """Raises the soft limit of open files to hold every shard file open, or refuses."""
    import resource

    needed = n_parts + 64  # the shard files, plus the graphs file, libraries, pipes
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            raise InputError(
                f"--parts {n_parts} needs {needed} open files; this process may open {hard} "
                "(ulimit -n)"
            )
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


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
) -> ShardMeta:
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
        What ``meta.json`` holds.

    Raises:
        InputError: On bad options or input, or an output directory that is not a shard one.
    """
    options.check()
    graphs_path, out_dir = Path(graphs_path), Path(out_dir)
    with GraphFile(graphs_path) as graphs:
        n_events, event_ids = len(graphs), graphs.event_ids
    _check_replaceable(out_dir)
    _allow_open_files(options.n_parts)
    meta = ShardMeta(
        method=options.method,
        n_parts=options.n_parts,
        seed=options.seed,
        margin=options.margin,
        run_id="",
        source=SourceGraphs(
            path=str(graphs_path.resolve()),
            sha256=file_sha256(graphs_path),
            format=GRAPHS_FORMAT,
            n_events=n_events,
        ),
        event_ids=event_ids,
        grid=list(options.grid) if options.grid else None,
        partgnn_version=__version__,
    )
    meta = dataclasses.replace(meta, run_id=partition_run_id(meta))
    # Every part file names its partition run, so files mixed from two runs are recognised.
    root_attrs = {
        "n_parts": options.n_parts,
        "method": options.method,
        "seed": options.seed,
        "run_id": meta.run_id,
        "source_sha256": meta.source.sha256,
    }
    with atomic_directory(out_dir, is_shard_directory_file, what="partition") as staging:
        files = [create_h5(shard_path(staging, rank)) for rank in range(options.n_parts)]
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
            guard = SpaceGuard(out_dir, [shard_path(staging, r) for r in range(options.n_parts)])
            statistics: list[PartitionStatistics] = []
            split_events = _split_all(graphs_path, n_events, options, workers)
            for split in tqdm(
                split_events, total=n_events, desc="partition", unit="event", disable=not progress
            ):
                guard.check(sum(a.nbytes for arrays in split.ranks for a in arrays.values()))
                for rank, h5 in enumerate(files):
                    _write_rank_event(h5["events"], split, rank)
                    h5.flush()
                guard.written()
                statistics.append(split.statistics)
        finally:
            for h5 in files:
                h5.close()
        meta = dataclasses.replace(
            meta,
            summary=PartitionSummary(**summarize(statistics, options.hidden)),
            per_event=[
                EventPartition(event_id=event_id, **stats.to_dict(options.hidden))
                for event_id, stats in zip(event_ids, statistics, strict=True)
            ],
        )
        content = json_files.strict(meta.as_json())  # the checksum is of what the file holds
        meta = dataclasses.replace(meta, checksum=meta_checksum(content))
        content["checksum"] = meta.checksum
        text = json_files.dumps(content, indent=2, sort_keys=True)
        (staging / META_FILE).write_text(text + "\n")
    return meta


def partition_run_id(meta: ShardMeta) -> str:
    """The identifier of a partition run: a digest of what decides its output.

    Format version, method, P, seed, grid, margin, event ids and the source file's checksum:
    two runs with the same id write the same shards (partitioning is deterministic), and part
    files of runs that differ in any of these carry different ids.
    """
    decided_by = {
        "format_version": meta.format_version, "method": meta.method, "n_parts": meta.n_parts,
        "seed": meta.seed, "grid": meta.grid, "margin": meta.margin,
        "event_ids": meta.event_ids, "source_sha256": meta.source.sha256,
    }  # fmt: skip
    text = json.dumps(decided_by, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def split_event(
    graph: Data, options: PartitionOptions, extra: dict[str, np.ndarray] | None = None
) -> _SplitEvent:
    """Partitions one event graph, builds and validates every rank's plan, gathers its data:
    the graph's fields and the fields its file keeps beside it (``extra``: those of one number
    per node under ``extra/nodes/``, per edge under ``extra/edges/``, so a run can read them
    as inputs: :mod:`partgnn.data.graphs.input_features`)."""
    edge_index = graph.edge_index.numpy()
    assignment = partition_graph(
        graph, options.n_parts, options.method, seed=options.seed, grid=options.grid
    )
    plans = build_halo_plans(edge_index, assignment, options.n_parts)
    validate_plans(plans, edge_index, assignment)
    fields = {name: _field(graph, name) for name in (*NODE_FIELDS, *EDGE_FIELDS)}
    kept_nodes, kept_edges = kept_fields(extra or {}, graph.num_nodes, edge_index.shape[1])
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
        arrays.update(_kept_arrays(kept_nodes, kept_edges, plan.local_nodes, plan.edge_ids, ""))
        arrays.update({f"plan/{name}": getattr(plan, name) for name in PLAN_ARRAYS})
        arrays["edge_index"] = plan.edge_index
        arrays["edge_owned"] = plan.edge_owned.astype(np.uint8)
        attrs = {"": event_attrs, "plan": plan_attrs}
        if options.margin > 0:
            sector = extended_sector(
                edge_index, assignment, plan.rank, options.margin, options.n_parts
            )
            arrays.update(_subgraph_arrays(fields, sector.nodes, sector.edge_ids, "sector/"))
            arrays.update(
                _kept_arrays(kept_nodes, kept_edges, sector.nodes, sector.edge_ids, "sector/")
            )
            arrays.update({f"sector/{name}": getattr(sector, name) for name in SECTOR_ARRAYS})
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


def _split_all(
    graphs_path: Path, n_events: int, options: PartitionOptions, workers: int
) -> Iterator[_SplitEvent]:
    tasks = ((graphs_path, index, options) for index in range(n_events))
    return ordered_map(_split_task, tasks, n_items=n_events, workers=workers)


_WORKER_GRAPHS: dict[Path, GraphFile] = {}


def _split_task(task: tuple[Path, int, PartitionOptions]) -> _SplitEvent:
    graphs_path, index, options = task
    if graphs_path not in _WORKER_GRAPHS:
        _WORKER_GRAPHS[graphs_path] = GraphFile(graphs_path)
    graphs = _WORKER_GRAPHS[graphs_path]
    return split_event(graphs[index], options, graphs.extra(index))


def _write_rank_event(events_group: h5py.Group, split: _SplitEvent, rank: int) -> None:
    group = events_group.create_group(event_key(split.event_id))
    for path, attrs in split.group_attrs[rank].items():
        target = group.require_group(path) if path else group
        write_attrs(target, attrs)
    for path, array in split.ranks[rank].items():
        folder, _, name = path.rpartition("/")
        write_array(group.require_group(folder) if folder else group, name, array)


def _subgraph_arrays(
    fields: dict[str, np.ndarray], nodes: np.ndarray, edges: np.ndarray, prefix: str
) -> dict[str, np.ndarray]:
    arrays = {f"{prefix}{name}": fields[name][nodes] for name in NODE_FIELDS}
    arrays.update({f"{prefix}{name}": fields[name][edges] for name in EDGE_FIELDS})
    return arrays


def kept_fields(
    extra: dict[str, np.ndarray], n_nodes: int, n_edges: int
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The kept fields of one number per node, and per edge (a field of as many values as
    both is in both; fields of other shapes are not carried into shards)."""
    numbers = {
        name: np.asarray(values) for name, values in extra.items()
        if np.asarray(values).ndim == 1 and np.issubdtype(np.asarray(values).dtype, np.number)
    }  # fmt: skip
    nodes = {name: values for name, values in numbers.items() if values.shape[0] == n_nodes}
    edges = {name: values for name, values in numbers.items() if values.shape[0] == n_edges}
    return nodes, edges


def _kept_arrays(
    nodes: dict[str, np.ndarray],
    edges: dict[str, np.ndarray],
    node_ids: np.ndarray,
    edge_ids: np.ndarray,
    prefix: str,
) -> dict[str, np.ndarray]:
    arrays = {f"{prefix}extra/nodes/{name}": values[node_ids] for name, values in nodes.items()}
    arrays.update(
        {f"{prefix}extra/edges/{name}": values[edge_ids] for name, values in edges.items()}
    )
    return arrays


def _field(graph: Data, name: str) -> np.ndarray:
    return graph[name].numpy().astype(GRAPH_FIELDS[name], copy=False)


def _check_replaceable(out_dir: Path) -> None:
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise InputError(f"{out_dir}: exists and is not a directory")
    if any(out_dir.iterdir()) and not (out_dir / META_FILE).exists():
        raise InputError(f"{out_dir}: a non-empty directory that is not a shard directory")
