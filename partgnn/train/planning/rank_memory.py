"""Per-rank peak memory of a training run, predicted before it starts (``partgnn plan``).

A rank's peak is the sum of three parts, each from something known before the run:

- **base**: the process itself (interpreter, torch, PyG, partgnn), measured once by starting an
  idle partgnn process on this machine (:func:`measure_base_bytes`); on CUDA, where the plan is
  of device memory, the GPU memory a process's CUDA context and cuBLAS take outside torch's
  allocator (:func:`measure_cuda_context_bytes`). NCCL's communicators (a few to a few hundred
  MB per rank, by peers and channels) come on top and are not predicted: a run reports the
  GPU's memory in use beside torch's peak (``device_used_mb_per_rank``);
- **data**: the training items the rank keeps (the item cache holds them up to
  ``data.cache_mb``; past it, the current event and the one read ahead) and the decoded arrays
  of the event being read ahead, sized from the shards' or graphs file's index
  (:meth:`~partgnn.partition.shard_reader.ShardFile.shape`) and what an item holds per edge and
  node (:class:`ItemSize`: 1.3x the stored bytes on the full recipe's shards);
- **step**: one training step of the configured model on the rank's largest graph, from the
  live bytes per edge and per node measured on probe graphs, times what the process holds per
  live byte (:func:`~partgnn.train.planning.footprint.measure_footprint`).

:func:`ranks_needed` answers the inverse question (how many ranks does an event need on a device
with X GB) by partitioning the event for growing P and predicting each rank;
:func:`choose_recompute` whether the run needs activation recomputation on such a device.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import numpy as np
import torch

from partgnn.data.files.storage import GraphFile
from partgnn.data.graphs.graph_fields import EventShape
from partgnn.errors import InputError
from partgnn.partition.shard_reader import ShardDirectory
from partgnn.train.config.sections import TrainConfig
from partgnn.train.planning.footprint import Footprint
from partgnn.train.strategies import mode_facts, orders_interior_first

#: Most ranks :func:`ranks_needed` tries.
MAX_PARTS = 256


@dataclass(frozen=True)
class ItemSize:
    """Bytes of the tensors a rank's training item holds (:func:`~partgnn.train.items.item_cache.
    item_tensors`, what the item cache keeps), per local edge, node and halo node.

    Attributes:
        per_edge: ``edge_index`` (int64), ``edge_attr``, ``y`` and, where the config has them,
            per-edge loss weights, the counted edges' positions (int64) and the interior-first
            edge order and its inverse (int64); the ``counted`` and ``boundary`` masks.
        per_node: ``x``.
        per_halo: The exchange's send index (int64; as many rows as halo nodes on average).
    """

    per_edge: float
    per_node: float
    per_halo: float = 8.0

    @classmethod
    def of(cls, config: TrainConfig, node_features: int, edge_features: int) -> ItemSize:
        """What an item of ``config``'s mode holds, for these feature widths (items keep the
        stored float32 features; a step casts them to ``run.dtype``)."""
        facts = mode_facts(config.mode)
        value = 4
        per_edge = 16 + value * edge_features + value + 2
        if facts.reads_shards:
            per_edge += 8  # counted_index: a rank does not count the edges another one owns
        if config.loss.target_pt is not None:
            per_edge += value  # the per-edge loss weights
        if orders_interior_first(config):
            per_edge += 16  # interior-first order and its inverse
        return cls(per_edge=float(per_edge), per_node=float(value * node_features))

    def bytes(self, shape: EventShape) -> float:
        """Bytes of the item of an event of this shape."""
        return (
            self.per_edge * shape.edges + self.per_node * shape.nodes + self.per_halo * shape.halo
        )


@dataclass(frozen=True)
class RankMemory:
    """Predicted peak memory of one rank.

    Attributes:
        rank: Rank in its graph-parallel group (0 for whole-graph modes).
        nodes: Local nodes (owned plus halo) of the rank's largest graph.
        halo: Halo nodes among ``nodes``.
        edges: Local edges of the rank's largest graph.
        base_bytes: The process without data (0 on CUDA).
        data_bytes: Training items kept, and the decoded arrays of the event read ahead.
        step_bytes: One training step's tensors on the largest graph.
    """

    rank: int
    nodes: int
    halo: int
    edges: int
    base_bytes: float
    data_bytes: float
    step_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.base_bytes + self.data_bytes + self.step_bytes


def measure_cuda_context_bytes(device: torch.device) -> int:
    """GPU memory a fresh process's CUDA context and cuBLAS take on ``device``, outside torch's
    allocator: the drop of the device's free memory while a child process that made them
    (and one matrix product) waits.

    Raises:
        RuntimeError: The child could not start or make its context.
    """
    index = device.index if device.index is not None else torch.cuda.current_device()
    code = (
        "import sys, torch\n"
        f"x = torch.ones(256, 256, device='cuda:{index}')\n"
        "(x @ x).sum().item()\n"
        "print('ready', flush=True)\n"
        "sys.stdin.readline()\n"
    )
    torch.cuda.synchronize(device)
    free_before = torch.cuda.mem_get_info(device)[0]
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = child.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"could not start a CUDA process: {child.stderr.read()[-200:]}")
        free_during = torch.cuda.mem_get_info(device)[0]
    finally:
        child.communicate(input="\n", timeout=300)
    # The child's tensors (256 KiB, in a 2 MiB block of torch's allocator) are not context.
    return max(0, free_before - free_during - 2 * 2**20)


def measure_base_bytes() -> int:
    """Peak RSS of a partgnn process that has imported its training stack and done nothing.

    Read from the child's own ``VmHWM`` (its memory map's high-water mark): ``ru_maxrss`` would
    carry this process's peak across ``fork`` and ``exec``.
    """
    code = (
        "import resource, partgnn.train.trainer\n"
        "try:\n"
        "    status = open('/proc/self/status').read().split('VmHWM:')[1]\n"
        "    print(int(status.split()[0]))\n"
        "except (OSError, IndexError):\n"
        "    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=300
    )
    if done.returncode:
        raise RuntimeError(f"could not start a partgnn process: {done.stderr.strip()[-200:]}")
    return int(done.stdout.split()[-1]) * 1024  # KiB


def rank_shapes(config: TrainConfig) -> list[list[EventShape]]:
    """Sizes of every event each rank trains or validates on: one list per rank of the
    graph-parallel group (one list for the whole-graph modes ``full`` and ``ddp``).

    Raises:
        InputError: The graphs file or shard directory is missing or malformed.
    """
    facts = mode_facts(config.mode)
    if not facts.reads_shards:
        with GraphFile(config.data.graphs) as graphs:
            return [[graphs.shape(index) for index in range(len(graphs))]]
    shards = ShardDirectory(config.data.shards)
    sector = facts.loses_cut_edges  # a sector (and its margin), not the shard and its halo
    shapes = []
    for rank in range(shards.n_parts):
        with shards.open_rank(rank) as shard:
            shapes.append([shard.shape(index, sector=sector) for index in range(len(shard))])
    return shapes


def plan_ranks(
    shapes: list[list[EventShape]],
    footprint: Footprint,
    base_bytes: float,
    cache_bytes: float,
    item_size: ItemSize,
) -> list[RankMemory]:
    """Predicted peak memory of every rank from its events' sizes.

    Args:
        shapes: Per rank, the sizes of its events (:func:`rank_shapes`).
        footprint: The model's step bytes per edge and per node.
        base_bytes: The process without data.
        cache_bytes: The item cache's budget (``data.cache_mb`` in bytes).
        item_size: What a training item holds (:meth:`ItemSize.of`).
    """
    ranks = []
    for rank, events in enumerate(shapes):
        if not events:
            raise InputError(f"rank {rank} has no events to plan for")
        largest = max(events, key=lambda shape: footprint.bytes(shape.nodes, shape.edges))
        ranks.append(
            RankMemory(
                rank=rank,
                nodes=largest.nodes,
                halo=largest.halo,
                edges=largest.edges,
                base_bytes=base_bytes,
                data_bytes=data_bytes(
                    [item_size.bytes(shape) for shape in events],
                    cache_bytes,
                    read_ahead_bytes=max(shape.nbytes for shape in events),
                ),
                step_bytes=footprint.bytes(largest.nodes, largest.edges),
            )
        )
    return ranks


def data_bytes(item_bytes: list[float], cache_bytes: float, read_ahead_bytes: float = 0.0) -> float:
    """Bytes of training items a rank holds at once (all of them while they fit the cache;
    past it, the cache full plus the item in use and the one read ahead), plus the decoded
    arrays of the event being read ahead (``read_ahead_bytes``, while its item is made)."""
    total = float(sum(item_bytes))
    held = total if total <= cache_bytes else cache_bytes + 2.0 * max(item_bytes)
    return held + read_ahead_bytes


def choose_recompute(
    peak_bytes: dict[bool, float], budget_bytes: float, headroom: float = 0.0
) -> bool | None:
    """Whether a run should recompute activations on devices of ``budget_bytes``: not where the
    largest rank fits without (recomputation costs time), else where it fits with it.

    Args:
        peak_bytes: The largest rank's predicted peak by ``model.recompute`` (``False``/``True``).
        budget_bytes: Memory of one device.
        headroom: Share of the prediction kept free on top of it (0.15: 15 %).

    Returns:
        ``False`` or ``True``; ``None`` when neither fits (more ranks: :func:`ranks_needed`).
    """
    for recompute in (False, True):
        if peak_bytes[recompute] * (1.0 + headroom) <= budget_bytes:
            return recompute
    return None


@dataclass(frozen=True)
class RanksNeeded:
    """The answer of :func:`ranks_needed`.

    Attributes:
        event: Sizes of the event planned for.
        n_parts: Smallest P whose largest rank fits, or ``None`` if none up to the limit does.
        ranks: The per-rank prediction at ``n_parts`` (at the limit when none fits).
        tried: ``(P, largest rank's bytes)`` for every P tried.
    """

    event: EventShape
    n_parts: int | None
    ranks: list[RankMemory]
    tried: list[tuple[int, float]]


def ranks_needed(
    graphs: GraphFile,
    index: int,
    footprint: Footprint,
    base_bytes: float,
    budget_bytes: float,
    item_size: ItemSize,
    *,
    method: str = "metis",
    max_parts: int = MAX_PARTS,
    headroom: float = 0.0,
) -> RanksNeeded:
    """The fewest ranks whose largest rank's predicted peak fits ``budget_bytes``, for one event.

    A rank fits when its predicted peak times ``1 + headroom`` is at most ``budget_bytes``: the
    prediction's error (measured within 15 % of the peak, and low with recomputation) is kept
    free.

    The event is partitioned (``method``, seed 0) for each P tried; a rank's data is its item
    (``item_size``). P starts at the estimate ``step bytes of the whole graph / room left per
    rank`` and grows by one.

    Args:
        graphs: The graphs file.
        index: The event's index in it.
        footprint: The model's step bytes per edge and per node.
        base_bytes: The process without data.
        budget_bytes: Memory of one device (or one rank's share of a host).
        item_size: What a training item holds (:meth:`ItemSize.of`).
        method: Partition method (:data:`~partgnn.partition.assign.METHODS`).
        max_parts: Most ranks to try.
        headroom: Share of the prediction kept free on top of it (0.15: 15 %).
    """
    from partgnn.partition.assign import partition_graph
    from partgnn.partition.work import partition_counts

    graph = graphs[index]
    shape = graphs.shape(index)
    edge_index = graph.edge_index.numpy()
    usable = budget_bytes / (1.0 + headroom)
    room = usable - base_bytes
    whole = footprint.bytes(shape.nodes, shape.edges) + item_size.bytes(shape)
    start = 1 if room <= 0 else max(1, min(max_parts, int(whole // room)))
    tried: list[tuple[int, float]] = []
    ranks: list[RankMemory] = []
    for n_parts in range(start, max_parts + 1):
        part = partition_graph(graph, n_parts, method, seed=0)
        local_edges, owned, halo = partition_counts(edge_index, part, n_parts)
        ranks = [
            RankMemory(
                rank=rank,
                nodes=int(owned[rank] + halo[rank]),
                halo=int(halo[rank]),
                edges=int(local_edges[rank]),
                base_bytes=base_bytes,
                data_bytes=item_size.bytes(
                    EventShape(
                        int(owned[rank] + halo[rank]), int(local_edges[rank]), int(halo[rank]), 0
                    )
                ),
                step_bytes=footprint.bytes(int(owned[rank] + halo[rank]), int(local_edges[rank])),
            )
            for rank in range(n_parts)
        ]
        largest = max(rank.total_bytes for rank in ranks)
        tried.append((n_parts, largest))
        if largest <= usable:
            return RanksNeeded(shape, n_parts, ranks, tried)
        if room <= 0:
            break
    return RanksNeeded(shape, None, ranks, tried)


def largest_event(graphs: GraphFile) -> int:
    """Index of the graph with the most edges (the first on ties)."""
    edges = [graphs.shape(index).edges for index in range(len(graphs))]
    if not edges:
        raise InputError(f"{graphs.path}: no events")
    return int(np.argmax(edges))
