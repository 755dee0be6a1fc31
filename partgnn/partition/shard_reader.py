"""Reading pre-split datasets: a shard directory's ``meta.json`` and one rank's shard file.

``partgnn partition graphs.h5 --parts P --method M --out DIR`` writes (see
:mod:`partgnn.partition.shard_writer`)::

    DIR/meta.json          format, version, method, P, seed, margin, run id, source file and
                           its SHA-256, event ids, partition statistics (per event and mean)
    DIR/part-00000.h5      rank 0's share of every event: its local subgraph and halo plan
    DIR/part-00001.h5      ...

so that a rank reads only its own file. Each shard event group holds the node fields of the
rank's local nodes (owned, then halo; see :mod:`partgnn.partition.halo_plan`), the edge fields
of its local edges, and the plan arrays; with ``margin > 0`` also a ``sector/`` sub-group with an
extended naive sector (:func:`~partgnn.partition.naive.extended_sector`). Training and inference
import only this module (no partitioner, no pymetis).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import h5py
import numpy as np

from partgnn.data.files.h5_files import (
    LazyH5File,
    damaged_file_errors,
    decode_attr,
    event_key,
    file_sha256,
    group_nbytes,
    read_array,
)
from partgnn.data.graphs.graph_fields import EventShape
from partgnn.errors import InputError, first_line
from partgnn.partition.rank_event import (
    RankEvent,
    read_rank_event,
)
from partgnn.partition.shard_meta import META_FILE, SHARDS_FORMAT_VERSION, ShardMeta

T = TypeVar("T")

SHARD_FORMAT = "partgnn-shard"


def shard_path(directory: str | os.PathLike[str], rank: int) -> Path:
    """Path of rank ``rank``'s shard file in a shard directory."""
    return Path(directory) / f"part-{rank:05d}.h5"


def is_shard_directory_file(relative: Path) -> bool:
    """Whether a file of a shard directory (its path relative to it) is one ``partition``
    writes: ``meta.json`` or a part file."""
    name = relative.name
    return len(relative.parts) == 1 and (
        name == META_FILE or re.fullmatch(r"part-\d{5,}\.h5", name) is not None
    )


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
        if not self.directory.is_dir():
            raise InputError(f"{self.directory}: shard directory not found")
        #: The directory's meta.json, checked.
        self.meta = ShardMeta.read(self.directory)
        self.n_parts = self.meta.n_parts
        if world_size is not None and world_size != self.n_parts:
            raise InputError(
                f"{self.directory}: shards are for {self.n_parts} ranks but the world size is "
                f"{world_size} (re-partition with --parts {world_size} or launch "
                f"{self.n_parts} processes)"
            )

    @property
    def margin(self) -> int:
        """Hops of the extended sectors the shards store (``partition --margin K``; 0:
        none)."""
        return self.meta.margin

    @property
    def source_sha256(self) -> str:
        return self.meta.source.sha256

    @property
    def provenance(self) -> dict[str, object]:
        """What names the partition run: every part file carries the same values (and its rank)."""
        return {
            "n_parts": self.n_parts,
            "method": self.meta.method,
            "seed": self.meta.seed,
            "run_id": self.meta.run_id,
            "source_sha256": self.source_sha256,
        }

    def check_source(self, graphs_path: str | os.PathLike[str], sha256: str | None = None) -> None:
        """Raises InputError if the shards were not made from this graphs file.

        Args:
            graphs_path: The graphs file.
            sha256: Its checksum, when the caller already has it (else it is computed).
        """
        if (sha256 or file_sha256(graphs_path)) != self.source_sha256:
            raise InputError(
                f"{self.directory}: shards were made from another file than {graphs_path} "
                "(checksums differ; re-run partgnn partition)"
            )

    def open_rank(self, rank: int) -> ShardFile:
        """The lazy reader of rank ``rank``'s shard file."""
        if not 0 <= rank < self.n_parts:
            raise InputError(f"{self.directory}: rank {rank} not in [0, {self.n_parts})")
        shard = ShardFile(shard_path(self.directory, rank), self)
        if shard.rank != rank:
            shard.close()
            raise InputError(
                f"{shard.path}: is the part file of rank {shard.rank}, not of rank {rank} "
                "(renamed or copied part files?)"
            )
        return shard


class ShardFile:
    """Lazy per-event reader of one rank's shard file (checked against meta.json)."""

    def __init__(self, path: Path, directory: ShardDirectory) -> None:
        self.path = path
        self.directory = directory
        self._h5 = LazyH5File(path, missing="shard file missing")
        with damaged_file_errors(path):
            self._check_index()

    def _check_index(self) -> None:
        path, directory = self.path, self.directory
        attrs = self._h5.get().attrs
        expected = {
            "format": SHARD_FORMAT,
            "format_version": SHARDS_FORMAT_VERSION,
            **directory.provenance,
        }
        for key, value in expected.items():
            found = decode_attr(attrs.get(key))
            if found != value:
                raise InputError(
                    f"{path}: {key} is {found!r} but meta.json says {value!r} "
                    "(shard from another partition run?)"
                )
        self.rank = int(attrs["rank"])
        self.keys = [event_key(event_id) for event_id in directory.meta.event_ids]
        missing = [key for key in self.keys if key not in self._h5.get()["events"]]
        if missing:
            raise InputError(f"{path}: lacks event {missing[0]} listed in meta.json")

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, index: int) -> RankEvent:
        where = f"{self.path}: {self.keys[index]}"
        return self._read(index, lambda group: read_rank_event(group, self.rank, where))

    def __iter__(self) -> Iterator[RankEvent]:
        for index in range(len(self)):
            yield self[index]

    def plan_array(self, index: int, name: str) -> np.ndarray:
        """One plan array of event ``index`` (one of :data:`PLAN_ARRAYS`), read alone (no node
        or edge fields decoded)."""
        return self._read(index, lambda group: read_array(group["plan"], name))

    def n_global_edges(self, index: int) -> int:
        """Edges of event ``index``'s whole graph (read from the attributes alone)."""
        return self._read(index, lambda group: int(group.attrs["n_global_edges"]))

    def shape(self, index: int, *, sector: bool = False) -> EventShape:
        """Sizes of the rank's graph of event ``index`` (from the file's index alone).

        Args:
            index: Event index.
            sector: The naive sector's graph (owned nodes plus replicated margin) instead of
                the halo graph; the halo graph when the shard has no sector.
        """

        def read(group: h5py.Group) -> EventShape:
            graph = group["sector"] if sector and "sector" in group else group
            return EventShape(
                nodes=int(graph["x"].shape[0]),
                edges=int(graph["edge_index"].shape[1]),
                halo=0 if graph is not group else int(group["plan"]["halo_nodes"].shape[0]),
                nbytes=group_nbytes(group),
            )

        return self._read(index, read)

    def owned_edge_truth(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Truth ``y`` and particle pT ``edge_pt`` of the edges of event ``index`` this rank
        owns (counts in the loss), each ``(E_owned,)``, read alone."""

        def read(group: h5py.Group) -> tuple[np.ndarray, np.ndarray]:
            owned = read_array(group, "edge_owned").astype(bool)
            return read_array(group, "y")[owned], read_array(group, "edge_pt")[owned]

        return self._read(index, read)

    def edge_ids(self, index: int) -> np.ndarray:
        """Global ids of the rank's local edges of event ``index``, ``(E_local,)``."""
        return self.plan_array(index, "edge_ids")

    def owned_nodes(self, index: int) -> np.ndarray:
        """Global ids of the rank's owned nodes of event ``index``, ``(n_owned,)``."""
        return self.plan_array(index, "owned_nodes")

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
