"""A training run's ``summary.json``: what the trainer writes at the end of a run, and its one
reader.

The trainer (:mod:`partgnn.train.trainer`) makes a :class:`RunSummary` and writes
:meth:`RunSummary.as_json`; ``partgnn train``, ``partgnn report``, a run directory's check
(:mod:`partgnn.train.run_directory.existing_run`) and the benchmark tools read it with
:meth:`RunSummary.read`, which also reads the summaries older partgnn wrote (``graph_parallel_size``
for the group size, ``strategy`` for the mode, the mode names used before ``overlapping`` had its
own).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from partgnn import json_files
from partgnn.errors import InputError
from partgnn.metrics.epoch_metrics import EpochMetrics

#: The file a finished run writes into its run directory.
SUMMARY_NAME = "summary.json"

#: Names runs recorded for a mode before it had its own, and the mode's name now (summaries,
#: checkpoints' trajectories): overlapping sectors were mode ``naive`` on shards with a margin,
#: labelled ``overlap``.
FORMER_MODE_NAMES: dict[str, str] = {"overlap": "overlapping"}

NAN = json_files.NAN


@dataclass(frozen=True)
class RecordedMode:
    """What a run's summary says of its training mode (the facts its strategy declared,
    :class:`partgnn.train.modes.ModeFacts`, recorded as ``mode_facts``).

    Attributes:
        name: The mode (``halo``, ``overlapping``...).
        phrase: The mode in a sentence (``halo exchange``).
        exact: The run computed the full-graph trajectory (a reference for the sector runs).
        one_process: The mode runs on one process.
        loses_cut_edges: Each rank trained on a sector without the edges that cross its
            boundary (all of them, or those beyond a margin).
    """

    name: str
    phrase: str
    exact: bool
    one_process: bool
    loses_cut_edges: bool

    @classmethod
    def of_record(cls, facts: Any, where: str) -> RecordedMode:
        """The mode of a summary's ``mode_facts`` record.

        Raises:
            InputError: A record that lacks one of the facts or has one of another type.
        """
        kinds = {"name": str, "phrase": str, "exact": bool, "one_process": bool,
                 "loses_cut_edges": bool}  # fmt: skip
        if not isinstance(facts, dict) or any(
            not isinstance(facts.get(key), kind) for key, kind in kinds.items()
        ):
            raise InputError(f"{where}: 'mode_facts' lacks one of {', '.join(kinds)}")
        return cls(**{key: facts[key] for key in kinds})

    @classmethod
    def before_recorded(cls, name: str) -> RecordedMode | None:
        """The facts of a mode named ``name`` by a summary written before they were recorded
        (partgnn before 2026-12-02); ``None``: no such mode."""
        return _FACTS_BEFORE_RECORDED.get(name)


_FACTS_BEFORE_RECORDED: dict[str, RecordedMode] = {
    "full": RecordedMode("full", "the full graph", True, True, False),
    "ddp": RecordedMode("ddp", "data parallelism", False, False, False),
    "halo": RecordedMode("halo", "halo exchange", True, False, False),
    "naive": RecordedMode("naive", "naive sectorisation", False, False, True),
    "overlap": RecordedMode("overlapping", "overlapping sectors", False, False, True),
}


@dataclass(frozen=True)
class Communication:
    """Bytes all ranks sent and received in halo exchanges during training.

    Attributes:
        bytes_sent: Bytes sent (``None``: not recorded).
        bytes_received: Bytes received (``None``: not recorded).
    """

    bytes_sent: int | None = None
    bytes_received: int | None = None

    @classmethod
    def of_json(cls, content: dict[str, Any], where: str) -> Communication:
        """The record a summary's ``communication`` object holds (what it lacks: ``None``)."""
        return cls(
            bytes_sent=_integer(content, "bytes_sent", where, default=None),
            bytes_received=_integer(content, "bytes_received", where, default=None),
        )


@dataclass(frozen=True)
class ComputedWork:
    """What the ranks computed during training, summed over them.

    Attributes:
        computed_nodes, owned_nodes: Node rows computed (owned and halo or replicated), and
            those owned.
        computed_edges, counted_edges: Edges computed, and those counted in the loss.
        replicated_node_fraction, replicated_edge_fraction: The work beyond what is owned or
            counted, as a share of it (NaN: not recorded).
        step_seconds_per_rank: Each rank's seconds of training steps, by global rank.
        gradient_wait_fraction_per_rank: Each rank's share of its step time spent waiting at
            the gradient all-reduce.
        gradient_wait_fraction: Their mean (NaN: not recorded).
    """

    computed_nodes: int | None = None
    owned_nodes: int | None = None
    computed_edges: int | None = None
    counted_edges: int | None = None
    replicated_node_fraction: float = NAN
    replicated_edge_fraction: float = NAN
    step_seconds_per_rank: list[float] = field(default_factory=list)
    gradient_wait_fraction_per_rank: list[float] = field(default_factory=list)
    gradient_wait_fraction: float = NAN

    @classmethod
    def of_json(cls, content: dict[str, Any], where: str) -> ComputedWork:
        """The record a summary's ``workload`` object holds (what it lacks: ``None``, NaN or
        empty)."""
        counts = {
            key: _integer(content, key, where, default=None)
            for key in ("computed_nodes", "owned_nodes", "computed_edges", "counted_edges")
        }
        fractions = {
            key: json_files.number(content.get(key))
            for key in (
                "replicated_node_fraction", "replicated_edge_fraction", "gradient_wait_fraction"
            )
        }  # fmt: skip
        lists = {
            key: [json_files.number(value) for value in content.get(key) or []]
            for key in ("step_seconds_per_rank", "gradient_wait_fraction_per_rank")
        }
        return cls(**counts, **fractions, **lists)


@dataclass
class RunSummary:
    """A training run's summary (``summary.json``).

    Attributes:
        mode: The training mode's name (``config.mode``).
        mode_facts: The facts its strategy declared (``ModeFacts.as_record()``: plain JSON
            values).
        sector_margin: Hops of the overlapping sectors trained on (0: none).
        world_size: Processes of the job.
        group_size: Ranks of a graph group, that share one event graph (the partition's ``P``).
        steps: Optimizer steps trained.
        total_steps: Optimizer steps the run is configured for.
        epochs: Epochs begun.
        parameters: Model parameters (``None``: not recorded).
        wall_time_s: Training wall time over every sitting [s] (NaN: not recorded).
        final: The last evaluation (``None``: none ran).
        stopped_by: The signal that stopped the run early (``SIGTERM``...; ``None``: it ran
            all its steps).
        communication: Bytes the ranks exchanged.
        workload: What the ranks computed.
        event_cache: The event source's cache statistics.
        already_finished: Not written: the run was finished before this sitting (a resume of a
            finished run changes nothing).
    """

    mode: str
    mode_facts: dict[str, Any]
    world_size: int
    group_size: int
    steps: int
    total_steps: int
    epochs: int
    sector_margin: int = 0
    parameters: int | None = None
    wall_time_s: float = NAN
    final: EpochMetrics | None = None
    stopped_by: str | None = None
    communication: Communication = field(default_factory=Communication)
    workload: ComputedWork = field(default_factory=ComputedWork)
    event_cache: dict[str, Any] = field(default_factory=dict)
    already_finished: bool = False

    @property
    def recorded_mode(self) -> RecordedMode:
        """The mode's facts the report reads (checked when the summary was read)."""
        return RecordedMode.of_record(self.mode_facts, SUMMARY_NAME)

    @property
    def bytes_sent(self) -> float:
        """Bytes all ranks sent in halo exchanges during training (NaN: not recorded)."""
        return json_files.number(self.communication.bytes_sent)

    def require_final(self) -> EpochMetrics:
        """The last evaluation.

        Raises:
            InputError: None ran (the run stopped before its first).
        """
        if self.final is None:
            raise InputError(f"{SUMMARY_NAME}: the run recorded no evaluation")
        return self.final

    def as_json(self) -> dict[str, Any]:
        """The content of ``summary.json`` (``already_finished`` is not written)."""
        record = dataclasses.asdict(self)
        del record["already_finished"]
        record["final"] = None if self.final is None else self.final.as_row()
        return record

    @classmethod
    def of_json(cls, content: Any, where: str) -> RunSummary:
        """The summary ``content`` (a parsed ``summary.json``) holds.

        Summaries older partgnn wrote are read as such: ``graph_parallel_size`` is the group
        size, ``strategy`` the mode, a mode's former name (:data:`FORMER_MODE_NAMES`) its name,
        and a summary without ``mode_facts`` gets its mode's facts of then.

        Raises:
            InputError: Not an object, no known mode, or a field of the wrong type (one line
                naming ``where`` and the field).
        """
        if not isinstance(content, dict):
            raise InputError(f"{where}: expected a JSON object, got {type(content).__name__}")
        content = dict(content)
        if "group_size" not in content and "graph_parallel_size" in content:
            content["group_size"] = content.pop("graph_parallel_size")
        facts = content.get("mode_facts")
        # Summaries before mode_facts named overlapping sectors by strategy ``overlap`` beside
        # mode ``naive``: the strategy says more.
        name = content.get("strategy") or content.get("mode")
        if facts is None:
            former = RecordedMode.before_recorded(name) if isinstance(name, str) else None
            if former is None:
                raise InputError(
                    f"{where}: no 'mode_facts' and no known 'mode' (is it a partgnn training "
                    "summary?)"
                )
            facts = dataclasses.asdict(former)
        mode = RecordedMode.of_record(facts, where)
        steps = _integer(content, "steps", where, default=0)
        return cls(
            mode=FORMER_MODE_NAMES.get(name, name) if isinstance(name, str) else mode.name,
            mode_facts=facts,
            world_size=_integer(content, "world_size", where, default=1),
            group_size=_integer(content, "group_size", where, default=1),
            steps=steps,
            total_steps=_integer(content, "total_steps", where, default=steps),
            epochs=_integer(content, "epochs", where, default=0),
            sector_margin=_integer(content, "sector_margin", where, default=0),
            parameters=_integer(content, "parameters", where, default=None),
            wall_time_s=json_files.number(content.get("wall_time_s")),
            final=(
                None
                if (final := _object(content, "final", where, default=None)) is None
                else EpochMetrics.of_row(final, f"{where}: final")
            ),
            stopped_by=_string(content, "stopped_by", where),
            communication=Communication.of_json(
                _object(content, "communication", where, default={}), where
            ),
            workload=ComputedWork.of_json(_object(content, "workload", where, default={}), where),
            event_cache=_object(content, "event_cache", where, default={}),
        )

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> RunSummary:
        """Reads a ``summary.json`` (a run directory: its ``summary.json``).

        Raises:
            InputError: Missing, unreadable, not JSON, or not a training summary (one line
                naming the file).
        """
        path = Path(path)
        if path.is_dir():
            path = path / SUMMARY_NAME
        missing = f"not found (is {path.parent} a training run directory?)"
        return cls.of_json(json_files.read_file(path, missing=missing), str(path))


def _integer(content: dict[str, Any], key: str, where: str, *, default: int | None) -> Any:
    value = content.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{where}: {key} must be an integer (got {value!r:.40})")
    return value


def _object(content: dict[str, Any], key: str, where: str, *, default: Any) -> Any:
    value = content.get(key)
    if value is None:
        return default
    if not isinstance(value, dict):
        raise InputError(f"{where}: {key} must be an object (got {value!r:.40})")
    return value


def _string(content: dict[str, Any], key: str, where: str) -> str | None:
    value = content.get(key)
    if value is not None and not isinstance(value, str):
        raise InputError(f"{where}: {key} must be a string (got {value!r:.40})")
    return value
