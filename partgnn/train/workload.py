"""What a run measures about itself besides its loss: time per epoch, work replicated across
ranks, the wait for the gradient reduction, peak memory and halo bytes, reduced over ranks."""

from __future__ import annotations

import dataclasses
import resource
from dataclasses import dataclass

import torch
import torch.distributed as dist

from partgnn.distributed.context import DistContext
from partgnn.distributed.halo_exchange import CommunicationCounter
from partgnn.train.events import TrainItem


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


@dataclass
class Workload:
    """What the ranks computed in the training steps since the start (or resume).

    Summed over steps (and, reduced, over ranks): nodes and edges a rank computes, against the
    nodes it owns and the edges it counts in the loss. The excess is replication: halo nodes and
    cut edges held twice (halo), the margin of overlapping sectors (overlap); 0 for full and
    naive.
    """

    computed_nodes: int = 0
    owned_nodes: int = 0
    computed_edges: int = 0
    counted_edges: int = 0
    step_seconds: float = 0.0
    reduce_seconds: float = 0.0

    def add(self, item: TrainItem) -> None:
        self.computed_nodes += int(item.x.shape[0])
        self.owned_nodes += int(item.n_owned)
        self.computed_edges += int(item.edge_index.shape[1])
        self.counted_edges += item.n_counted

    def add_time(self, step_seconds: float, reduce_seconds: float) -> None:
        """A step's compute and communication time, and the part spent in the gradient
        reduction (waiting for the slowest rank, then the all-reduce itself)."""
        self.step_seconds += step_seconds
        self.reduce_seconds += reduce_seconds

    def reduced(self, context: DistContext, device: torch.device) -> dict[str, float]:
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
        return {
            "computed_nodes": nodes,
            "owned_nodes": owned,
            "computed_edges": edges,
            "counted_edges": counted,
            "replicated_node_fraction": (nodes - owned) / owned if owned else float("nan"),
            "replicated_edge_fraction": (edges - counted) / counted if counted else float("nan"),
            "step_seconds_per_rank": step_s.tolist(),
            "gradient_wait_fraction_per_rank": waiting,
            "gradient_wait_fraction": sum(waiting) / len(waiting),
        }


def peak_memory_per_rank(context: DistContext, device: torch.device) -> list[float]:
    """Peak memory of every rank [MB]: CUDA peak allocation on GPUs, peak RSS on CPUs.

    .. warning::
        Collective over the whole job.
    """
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if context.global_world_size == 1:
        return [round(peak, 1)]
    gathered = torch.zeros(context.global_world_size, dtype=torch.float64, device=device)
    gathered[context.global_rank] = peak
    dist.all_reduce(gathered)
    return [round(v, 1) for v in gathered.tolist()]


def bytes_exchanged(
    counter: CommunicationCounter, context: DistContext, device: torch.device
) -> dict[str, int]:
    """Bytes all ranks sent and received in halo exchanges since ``counter`` started.

    .. warning::
        Collective over the whole job.
    """
    values = torch.tensor(
        [counter.bytes_sent, counter.bytes_received], dtype=torch.int64, device=device
    )
    if context.global_world_size > 1:
        dist.all_reduce(values)
    return {"bytes_sent": int(values[0]), "bytes_received": int(values[1])}
