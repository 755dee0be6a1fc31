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
from pathlib import Path

import h5py
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
from partgnn.errors import InputError
from partgnn.partition.event_split import (
    PartitionOptions,
    SplitEvent,
    split_all,
)
from partgnn.partition.shard_meta import (
    META_FILE,
    SHARDS_FORMAT_VERSION,
    EventPartition,
    PartitionSummary,
    ShardMeta,
    SourceGraphs,
    meta_checksum,
)
from partgnn.partition.shard_reader import SHARD_FORMAT, is_shard_directory_file, shard_path
from partgnn.partition.statistics import (
    PartitionStatistics,
    summarize,
)
from partgnn.version import __version__


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
            split_events = split_all(graphs_path, n_events, options, workers)
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


def _write_rank_event(events_group: h5py.Group, split: SplitEvent, rank: int) -> None:
    group = events_group.create_group(event_key(split.event_id))
    for path, attrs in split.group_attrs[rank].items():
        target = group.require_group(path) if path else group
        write_attrs(target, attrs)
    for path, array in split.ranks[rank].items():
        folder, _, name = path.rpartition("/")
        write_array(group.require_group(folder) if folder else group, name, array)


def _check_replaceable(out_dir: Path) -> None:
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise InputError(f"{out_dir}: exists and is not a directory")
    if any(out_dir.iterdir()) and not (out_dir / META_FILE).exists():
        raise InputError(f"{out_dir}: a non-empty directory that is not a shard directory")
