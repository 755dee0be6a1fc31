"""A shard directory's ``meta.json``: what ``partgnn partition`` records of its run, and its one
reader.

:func:`~partgnn.partition.shard_writer.write_shards` makes a :class:`ShardMeta` and writes
:meth:`ShardMeta.as_json`; everything that reads a shard directory reads it through
:meth:`ShardMeta.read` (:class:`~partgnn.partition.shard_reader.ShardDirectory` does), which
checks the format, its version, the content's checksum and every field a reader relies on.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from partgnn import json_files
from partgnn.errors import InputError

#: What a shard directory's meta.json says it is.
SHARDS_FORMAT = "partgnn-shards"

#: 2: part files name their partition run (method, seed, run id) besides P and the source.
#: 3: checksummed datasets and object headers (:data:`partgnn.data.files.h5_files.LIBVER`),
#: meta.json carries the SHA-256 of its own content.
SHARDS_FORMAT_VERSION = 3

META_FILE = "meta.json"

NAN = float("nan")

R = TypeVar("R")


@dataclass(frozen=True)
class SourceGraphs:
    """The graphs file a partition was made from.

    Attributes:
        path: Its path when it was partitioned (resolved).
        sha256: Its SHA-256.
        format: Its format name.
        n_events: Its events.
    """

    path: str
    sha256: str
    format: str | None = None
    n_events: int | None = None


@dataclass(frozen=True)
class EventPartition:
    """The partition of one event (:meth:`PartitionStatistics.to_dict
    <partgnn.partition.statistics.PartitionStatistics.to_dict>` and its event id). Per-rank
    lists have ``P`` entries; fractions undefined for the event (no edges) are NaN.
    """

    event_id: int
    n_parts: int
    n_nodes: int
    n_edges: int
    owned_nodes: list[int]
    halo_nodes: list[int]
    halo_ratio: list[float]
    local_edges: list[int]
    neighbours: list[int]
    send_rows: list[int]
    hidden: int
    bytes_per_exchange: list[int]
    edge_cut_fraction: float = NAN
    true_edge_cut_fraction: float = NAN
    node_imbalance: float = NAN
    edge_imbalance: float = NAN
    work_imbalance: float = NAN  # NaN in shards written before partgnn recorded it


@dataclass(frozen=True)
class PartitionSummary:
    """Means over a partition's events (:func:`~partgnn.partition.statistics.summarize`); NaN
    where undefined or not recorded (``work_imbalance`` in older shards)."""

    events: int
    hidden: int
    edge_cut_fraction: float = NAN
    true_edge_cut_fraction: float = NAN
    halo_ratio_mean: float = NAN
    halo_ratio_max: float = NAN
    node_imbalance: float = NAN
    edge_imbalance: float = NAN
    work_imbalance: float = NAN
    neighbours_max: float = NAN
    bytes_per_exchange_total: float = NAN
    bytes_per_exchange_max_rank: float = NAN


@dataclass(frozen=True)
class ShardMeta:
    """A shard directory's ``meta.json``.

    Attributes:
        method: The partitioner (``metis``, ``phi``...).
        n_parts: Parts ``P``: the ranks of a graph group.
        seed: The partitioner's seed.
        margin: Hops of the extended sectors stored (0: none).
        run_id: The partition run's identifier (part files carry it).
        source: The graphs file partitioned.
        event_ids: The events, in the part files' order.
        grid: The phi x eta sector grid of a geometric partition (``None``: not one).
        summary: Means over the events of the partition's statistics.
        per_event: Each event's statistics.
        partgnn_version: The version that wrote it.
        format_version: :data:`SHARDS_FORMAT_VERSION` of the files.
        checksum: SHA-256 of the content but this field (:func:`meta_checksum`).
    """

    method: str
    n_parts: int
    seed: int
    margin: int
    run_id: str
    source: SourceGraphs
    event_ids: list[int]
    grid: list[int] | None = None
    summary: PartitionSummary | None = None
    per_event: list[EventPartition] = dataclasses.field(default_factory=list)
    partgnn_version: str | None = None
    format_version: int = SHARDS_FORMAT_VERSION
    checksum: str = ""

    def as_json(self) -> dict[str, Any]:
        """The content of ``meta.json`` (with :attr:`checksum` as given)."""
        content: dict[str, Any] = {
            "format": SHARDS_FORMAT,
            "format_version": self.format_version,
            "partgnn_version": self.partgnn_version,
            "method": self.method,
            "n_parts": self.n_parts,
            "seed": self.seed,
            "grid": self.grid,
            "margin": self.margin,
            "source": dataclasses.asdict(self.source),
            "event_ids": list(self.event_ids),
            "run_id": self.run_id,
        }
        if self.summary is not None:
            content["statistics"] = {
                "summary": dataclasses.asdict(self.summary),
                "per_event": [dataclasses.asdict(row) for row in self.per_event],
            }
        if self.checksum:
            content["checksum"] = self.checksum
        return content

    @classmethod
    def read(cls, directory: str | os.PathLike[str]) -> ShardMeta:
        """Reads and checks ``DIRECTORY/meta.json``.

        Raises:
            InputError: Missing, not JSON, of another format or version, content that does not
                match its checksum, or a field a reader relies on missing or malformed (one line
                naming the file and the field).
        """
        meta_path = Path(directory) / META_FILE
        content = json_files.read_file(meta_path, missing="missing (not a partgnn shard directory)")
        if not isinstance(content, dict) or content.get("format") != SHARDS_FORMAT:
            raise InputError(f"{meta_path}: not a {SHARDS_FORMAT} description")
        version = content.get("format_version")
        if version != SHARDS_FORMAT_VERSION:
            raise InputError(
                f"{meta_path}: format version {version}, this partgnn reads "
                f"{SHARDS_FORMAT_VERSION} (re-run partgnn partition)"
            )
        if content.get("checksum") != meta_checksum(content):
            raise InputError(
                f"{meta_path}: content does not match its checksum (edited or corrupted; "
                "re-run partgnn partition)"
            )
        return cls.of_json(content, str(meta_path))

    @classmethod
    def of_json(cls, content: dict[str, Any], where: str) -> ShardMeta:
        """The record of a parsed meta.json (its fields checked; not its format or checksum).

        Raises:
            InputError: A field a reader relies on missing or malformed.
        """
        for key, (kind, wanted, valid) in _META_FIELDS.items():
            if key not in content:
                raise InputError(f"{where}: lacks field {key!r}")
            value = content[key]
            right_type = _is_int(value) if kind is int else isinstance(value, kind)
            if not (right_type and valid(value)):
                raise InputError(f"{where}: field {key!r} must be {wanted} (got {value!r:.60})")
        statistics = content.get("statistics")
        summary, per_event = None, []
        if statistics is not None:
            if not isinstance(statistics, dict):
                raise InputError(f"{where}: field 'statistics' must be an object")
            summary = _record(PartitionSummary, statistics.get("summary"), f"{where}: summary")
            rows = statistics.get("per_event")
            if not isinstance(rows, list):
                raise InputError(f"{where}: statistics lack their per_event list")
            per_event = [_record(EventPartition, row, f"{where}: per_event") for row in rows]
        source = content["source"]
        return cls(
            method=content["method"],
            n_parts=content["n_parts"],
            seed=content["seed"],
            margin=content["margin"],
            run_id=content["run_id"],
            source=SourceGraphs(
                path=source["path"],
                sha256=source["sha256"],
                format=source.get("format"),
                n_events=source.get("n_events"),
            ),
            event_ids=list(content["event_ids"]),
            grid=content.get("grid"),
            summary=summary,
            per_event=per_event,
            partgnn_version=content.get("partgnn_version"),
            format_version=content["format_version"],
            checksum=content.get("checksum", ""),
        )


def meta_checksum(meta: dict[str, Any]) -> str:
    """SHA-256 of a meta.json's content but its ``checksum`` field (sorted-key JSON)."""
    content = {key: value for key, value in meta.items() if key != "checksum"}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


#: meta.json fields every reader relies on: (type, what a value must be, check).
_META_FIELDS: dict[str, tuple[type, str, Callable[[Any], bool]]] = {
    "n_parts": (int, "an integer >= 1", lambda v: v >= 1),
    "method": (str, "a method name", lambda v: bool(v)),
    "seed": (int, "an integer", lambda v: True),
    "run_id": (str, "a run identifier", lambda v: bool(v)),
    "margin": (int, "an integer >= 0", lambda v: v >= 0),
    "source": (dict, "an object with the graphs file's path and sha256",
               lambda v: isinstance(v.get("sha256"), str) and isinstance(v.get("path"), str)),
    "event_ids": (list, "a list of distinct integer event ids",
                  lambda v: all(_is_int(i) for i in v) and len(set(v)) == len(v)),
}  # fmt: skip


def _record(cls: type[R], content: Any, where: str) -> R:
    """A statistics record of ``content``: its fields by name (``null``: NaN; keys the record
    does not know are left out).

    Raises:
        InputError: Not an object, or a field without default missing.
    """
    if not isinstance(content, dict):
        raise InputError(f"{where} must be an object (got {content!r:.40})")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values = {}
    for name, spec in fields.items():
        if name not in content:
            if spec.default is dataclasses.MISSING:
                raise InputError(f"{where} lacks {name!r}")
            continue
        value = content[name]
        values[name] = NAN if value is None else value
    return cls(**values)
