"""What a run measures about itself besides its loss: time per epoch, work replicated across
ranks, the wait for the gradient reduction, peak memory and halo bytes, reduced over ranks."""

from __future__ import annotations

import dataclasses
import resource
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from partgnn.distributed.communication_counter import CommunicationCounter
from partgnn.distributed.context import DistContext
from partgnn.metrics.run_summary import Communication, ComputedWork
from partgnn.train.items.train_item import TrainItem


@dataclass
class EpochTotals:
    """Running sums of one epoch (kept in checkpoints so a resumed epoch reports the same).

    ``seconds`` is compute and communication of the steps; ``data_seconds`` getting their
    events; ``wall_seconds`` everything between the first step's start and the last step's end
    (data, steps, logging, checkpoints), so ``wall_seconds / seconds`` is the data path's cost.
    """

    loss: float = 0.0
    steps: int = 0
    seconds: float = 0.0
    data_seconds: float = 0.0
    wall_seconds: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)

    def mean(self, total: float) -> float:
        """``total`` per step (NaN before the first step)."""
        return total / self.steps if self.steps else float("nan")


class DeviceStopwatch:
    """Sums intervals on the device's own clock: the host's on CPUs, CUDA events on GPUs.

    On a GPU, NCCL calls return as soon as they are queued, so host clocks around them read
    about zero; events recorded on the compute stream measure how long the stream waited for
    them. An interval's events are read at the next :meth:`add` or :attr:`seconds` (by then a
    step's host read has waited for them), so timing adds no host synchronisation.
    """

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self._seconds = 0.0
        self._pending: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    def mark(self) -> float | torch.cuda.Event:
        """Now, on the device's clock (pass two marks to :meth:`add`)."""
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def add(self, start: float | torch.cuda.Event, end: float | torch.cuda.Event) -> None:
        """Adds the interval between two marks."""
        if not self.cuda:
            self._seconds += end - start
            return
        self._resolve()
        self._pending.append((start, end))

    @property
    def seconds(self) -> float:
        """The intervals' total [s]."""
        self._resolve()
        return self._seconds

    def _resolve(self) -> None:
        for start, end in self._pending:
            end.synchronize()
            self._seconds += start.elapsed_time(end) / 1000
        self._pending.clear()


@dataclass
class Workload:
    """What the ranks computed in the training steps since the start (or resume).

    Summed over steps (and, reduced, over ranks): nodes and edges a rank computes, against the
    nodes it owns and the edges it counts in the loss. The excess is replication: halo nodes and
    cut edges held twice (halo), the margin of overlapping sectors (overlap); 0 for full and
    naive.
    """

    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    computed_nodes: int = 0
    owned_nodes: int = 0
    computed_edges: int = 0
    counted_edges: int = 0
    step_seconds: float = 0.0
    reduce_clock: DeviceStopwatch = field(init=False)

    def __post_init__(self) -> None:
        self.reduce_clock = DeviceStopwatch(self.device)

    @property
    def reduce_seconds(self) -> float:
        """Time spent in the gradient reduction after the backward pass, on the device's
        clock."""
        return self.reduce_clock.seconds

    def add(self, item: TrainItem) -> None:
        self.computed_nodes += int(item.x.shape[0])
        self.owned_nodes += int(item.n_owned)
        self.computed_edges += int(item.edge_index.shape[1])
        self.counted_edges += item.n_counted

    def add_time(self, step_seconds: float) -> None:
        """A step's compute and communication time (its part in the gradient reduction,
        waiting for the slowest rank and then the all-reduce, goes to :attr:`reduce_clock`)."""
        self.step_seconds += step_seconds

    def reduced(self, context: DistContext, device: torch.device) -> ComputedWork:
        """The sums over all ranks, with the replicated fractions (excess / owned or counted)."""
        values = torch.tensor(
            [self.computed_nodes, self.owned_nodes, self.computed_edges, self.counted_edges],
            dtype=torch.int64,
            device=device,
        )
        if context.global_world_size > 1:
            dist.all_reduce(values)
        nodes, owned, edges, counted = (int(v) for v in values.tolist())
        # Each rank's time in its own slot: the sum over ranks is every rank's time.
        times = torch.zeros((2, context.global_world_size), dtype=torch.float64, device=device)
        times[:, context.global_rank] = torch.tensor(
            [self.step_seconds, self.reduce_seconds], dtype=torch.float64
        )
        if context.global_world_size > 1:
            dist.all_reduce(times)
        step_s, reduce_s = times.cpu()
        waiting = (reduce_s / step_s.clamp(min=1e-12)).tolist()
        return ComputedWork(
            computed_nodes=nodes,
            owned_nodes=owned,
            computed_edges=edges,
            counted_edges=counted,
            replicated_node_fraction=(nodes - owned) / owned if owned else float("nan"),
            replicated_edge_fraction=(edges - counted) / counted if counted else float("nan"),
            step_seconds_per_rank=step_s.tolist(),
            gradient_wait_fraction_per_rank=waiting,
            gradient_wait_fraction=sum(waiting) / len(waiting),
        )


def peak_memory_per_rank(context: DistContext, device: torch.device) -> list[float]:
    """Peak memory of every rank [MB]: on GPUs the peak bytes torch's allocator reserved (what
    the memory planner predicts; the CUDA context and NCCL's buffers come on top, see
    :func:`cuda_memory_per_rank`), on CPUs the peak RSS.

    .. warning::
        Collective over the whole job.
    """
    if device.type == "cuda":
        peak = torch.cuda.max_memory_reserved(device) / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return _per_rank([peak], context, device)[0]


def cuda_memory_per_rank(
    context: DistContext, device: torch.device
) -> tuple[list[float], list[float]] | None:
    """On GPUs, every rank's peak allocated bytes (live tensors) and the bytes its GPU has in
    use now (torch's reserve plus the CUDA context and NCCL's buffers, and whatever else runs
    on that GPU) [MB], by global rank; on CPUs ``None``.

    .. warning::
        Collective over the whole job.
    """
    if device.type != "cuda":
        return None
    free, total = torch.cuda.mem_get_info(device)
    allocated, used = _per_rank(
        [torch.cuda.max_memory_allocated(device) / 2**20, (total - free) / 2**20], context, device
    )
    return allocated, used


def _per_rank(values: list[float], context: DistContext, device: torch.device) -> list[list[float]]:
    """Each of this rank's ``values`` gathered from every rank, rounded to 0.1."""
    if context.global_world_size == 1:
        return [[round(v, 1)] for v in values]
    gathered = torch.zeros(
        (len(values), context.global_world_size), dtype=torch.float64, device=device
    )
    gathered[:, context.global_rank] = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(gathered)
    return [[round(v, 1) for v in row] for row in gathered.tolist()]


def bytes_exchanged(
    counter: CommunicationCounter, context: DistContext, device: torch.device
) -> Communication:
    """Bytes all ranks sent and received in halo exchanges since ``counter`` started.

    .. warning::
        Collective over the whole job.
    """
    values = torch.tensor(
        [counter.bytes_sent, counter.bytes_received], dtype=torch.int64, device=device
    )
    if context.global_world_size > 1:
        dist.all_reduce(values)
    return Communication(bytes_sent=int(values[0]), bytes_received=int(values[1]))
