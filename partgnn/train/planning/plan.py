"""A run config's memory plan as one call: what ``partgnn plan`` prints.

Each rank's predicted peak from its events' sizes (:mod:`partgnn.train.planning.rank_memory`) and
one training step's bytes per edge and per node, measured on random probe graphs
(:mod:`partgnn.train.planning.footprint`); with a device size, also whether the run needs
recomputation there and the fewest ranks the largest event needs.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from typing import Any

import torch

from partgnn.data.files.storage import GraphFile
from partgnn.distributed.device import resolve_device
from partgnn.errors import InputError
from partgnn.partition.shard_reader import ShardDirectory
from partgnn.train.config.sections import TrainConfig, input_features
from partgnn.train.planning.footprint import Footprint, measure_footprint
from partgnn.train.planning.rank_memory import (
    MAX_PARTS,
    ItemSize,
    RankMemory,
    RanksNeeded,
    choose_recompute,
    largest_event,
    measure_base_bytes,
    measure_cuda_context_bytes,
    plan_ranks,
    rank_shapes,
    ranks_needed,
)

#: Bytes per MiB.
MIB = 2**20


@dataclass(frozen=True)
class RecomputeChoice:
    """Whether a run should recompute on devices of a given size.

    Attributes:
        peak_off: The largest rank's predicted peak without recomputation [bytes].
        peak_on: The same with it.
        recompute: The setting that fits (off when both do), ``None`` when neither does.
    """

    peak_off: float
    peak_on: float
    recompute: bool | None

    @classmethod
    def of(cls, peaks: dict[bool, float], budget_bytes: float, headroom: float) -> RecomputeChoice:
        """The choice for devices of ``budget_bytes`` from the largest rank's peak with
        ``model.recompute`` off and on
        (:func:`~partgnn.train.planning.rank_memory.choose_recompute`)."""
        return cls(peaks[False], peaks[True], choose_recompute(peaks, budget_bytes, headroom))


@dataclass(frozen=True)
class MemoryPlan:
    """A run config's predicted memory (:func:`plan_memory`).

    Attributes:
        device: Where the run computes.
        footprint: One training step's bytes per edge and per node.
        probe_seconds: How long measuring the footprint took.
        base_bytes: An idle partgnn process on the CPU, or the CUDA context on a GPU.
        ranks: Each rank's predicted peak (one group's ranks).
        group_size: Ranks per graph group (the shards' P; 1 for whole graphs).
        recompute_choice: With a device size: whether to recompute.
        needed: With a device size: the fewest ranks the largest event needs.
        method: The partition method the ranks count is for.
    """

    device: torch.device
    footprint: Footprint
    probe_seconds: float
    base_bytes: float
    ranks: list[RankMemory]
    group_size: int
    recompute_choice: RecomputeChoice | None = None
    needed: RanksNeeded | None = None
    method: str = "metis"

    @property
    def peak_bytes(self) -> float:
        """The largest rank's predicted peak."""
        return max(rank.total_bytes for rank in self.ranks)

    def as_record(self, memory_gb: float | None, headroom: float) -> dict[str, Any]:
        """The plan as ``partgnn plan --json`` prints it."""
        footprint = self.footprint
        choice = self.recompute_choice
        return {
            "device": str(self.device),
            "footprint": {
                "per_edge_bytes": footprint.per_edge,
                "per_node_bytes": footprint.per_node,
                "constant_bytes": footprint.constant,
                "resident_factor": footprint.resident_factor,
                "released_factor": footprint.released_factor,
            },
            "ranks": [{**vars(r), "total_bytes": r.total_bytes} for r in self.ranks],
            "peak_bytes": self.peak_bytes,
            "ranks_needed": None
            if self.needed is None
            else {"memory_gb": memory_gb, "headroom": headroom, "n_parts": self.needed.n_parts},
            "recompute_choice": None
            if choice is None
            else {
                "peak_bytes": {"off": choice.peak_off, "on": choice.peak_on},
                "recompute": choice.recompute,
            },
        }


def plan_memory(
    config: TrainConfig,
    *,
    memory_gb: float | None = None,
    headroom: float = 0.15,
    max_parts: int = MAX_PARTS,
) -> MemoryPlan:
    """Predicts the peak memory of every rank of a run of ``config``.

    Args:
        config: A validated run config (its shards or graphs file are read).
        memory_gb: A device's memory [GB]: also whether to recompute there, and the fewest
            ranks the largest event of the config's graphs needs.
        headroom: The share of the prediction kept free when fitting ``memory_gb``.
        max_parts: The most ranks tried for the largest event.

    Raises:
        InputError: Missing or malformed data, or (with ``memory_gb``) no graphs file to
            partition.
    """
    graphs_path = graphs_to_partition(config) if memory_gb is not None else None
    device = resolve_device(config.run.device, 0)
    shapes = rank_shapes(config)
    widths = feature_widths(config)
    base = measure_base_bytes() if device.type == "cpu" else measure_cuda_context_bytes(device)
    if memory_gb is not None and base * (1 + headroom) >= memory_gb * 1e9:
        raise InputError(
            f"--memory-gb {memory_gb:g}: a rank's process alone (Python, torch, partgnn, before "
            f"any graph) takes {base / 1e9:.2f} GB on this {device.type}, "
            f"{base * (1 + headroom) / 1e9:.2f} GB with the headroom: no number of ranks fits"
        )
    started = time.perf_counter()
    footprint = _measure_footprint(config, widths, device)
    probe_seconds = time.perf_counter() - started
    item_size = ItemSize.of(config, *widths)

    def ranks_with(step: Footprint) -> list[RankMemory]:
        return plan_ranks(shapes, step, base, config.data.cache_mb * MIB, item_size)

    ranks = ranks_with(footprint)
    method = partition_method(config)
    choice = needed = None
    if memory_gb is not None and config.model.target is None:
        other = dataclasses.replace(
            config, model=dataclasses.replace(config.model, recompute=not config.model.recompute)
        )
        peaks = {
            config.model.recompute: max(r.total_bytes for r in ranks),
            other.model.recompute: max(
                r.total_bytes for r in ranks_with(_measure_footprint(other, widths, device))
            ),
        }
        choice = RecomputeChoice.of(peaks, memory_gb * 1e9, headroom)
    if graphs_path is not None:
        with GraphFile(graphs_path) as graphs:
            needed = ranks_needed(
                graphs, largest_event(graphs), footprint, base, memory_gb * 1e9, item_size,
                method=method, max_parts=max_parts, headroom=headroom,
            )  # fmt: skip
    return MemoryPlan(
        device, footprint, probe_seconds, base, ranks, len(shapes), choice, needed, method
    )


def _measure_footprint(
    config: TrainConfig, widths: tuple[int, int], device: torch.device
) -> Footprint:
    """:func:`~partgnn.train.planning.footprint.measure_footprint` with torch on one thread, the
    caller's thread count restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return measure_footprint(config, *widths, device)
    finally:  # the plan may be made inside a longer process (the API, tests)
        torch.set_num_threads(threads)


def feature_widths(config: TrainConfig) -> tuple[int, int]:
    """Node and edge feature widths of the config's events: the columns it names, else its
    files' tables."""
    features = input_features(config)
    if not features.is_default:
        return features.widths
    if config.data.graphs:
        with GraphFile(config.data.graphs) as graphs:
            graph = graphs[0]
    else:
        with ShardDirectory(config.data.shards).open_rank(0) as shard:
            graph = shard[0].graph
    return int(graph.x.shape[1]), int(graph.edge_attr.shape[1])


def graphs_to_partition(config: TrainConfig) -> str:
    """The graphs file whose largest event a device size partitions: the config's
    ``data.graphs``, else the one its shards were made from (recorded in their meta.json).

    Raises:
        InputError: Neither is there (one line saying what to set).
    """
    if config.data.graphs:
        return str(config.data.graphs)
    source = str(ShardDirectory(config.data.shards).meta.source.path)
    if not os.path.isfile(source):
        raise InputError(
            f"{config.data.shards}: --memory-gb partitions the events the shards were made "
            f"from, {source}, which is not found: set data.graphs to that graphs file"
        )
    return source


def partition_method(config: TrainConfig) -> str:
    """The partition method of the config's shards (METIS without shards)."""
    if not config.data.shards:
        return "metis"
    return ShardDirectory(config.data.shards).meta.method
