"""The small object every distributed function receives: who am I, with whom, on what device.

Passed explicitly (never a module global), so graph parallelism composes with data parallelism:
``group`` is the graph-parallel group of the ``P`` ranks that share one event graph, and
``data_parallel_group`` links the ranks at the same position in different graph-parallel groups.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistContext:
    """Rank, group and device of one process.

    Each rank and size says whether it is the graph group's (``group_rank``, ``group_size``) or
    the whole job's (``global_rank``, ``global_world_size``), unlike ``torch.distributed``'s
    ``get_rank()``, which is the job's.

    Attributes:
        group_rank: Rank within the graph-parallel group, in ``[0, group_size)``; it selects the
            shard (``part-{group_rank:05d}.h5``) this process reads.
        group_size: Size ``P`` of the graph-parallel group.
        group: The graph-parallel process group (``None``: the default group, i.e. all ranks).
        device: Device of this rank's tensors (``cuda:<local_rank>`` or ``cpu``).
        backend: ``"gloo"`` or ``"nccl"``.
        global_rank: Rank in the whole job.
        global_world_size: Processes in the whole job.
        local_rank: Rank among the processes on this node (chooses the GPU).
        data_parallel_group: Ranks with the same ``group_rank`` in the other graph-parallel groups
            (``None`` when there is one group).
        launcher: How the job was started: ``"torchrun"``, ``"mpi"``, ``"slurm"``, ``"env"``
            (explicit environment variables) or ``"single"``.
        gradient_group: The graph-parallel group's ranks again, for the gradient all-reduce
            that runs during the backward pass (``None`` when ``group_size == 1``).
        control_group: The graph-parallel group's ranks on gloo, for small decisions the host
            makes (whether any rank failed) without a GPU synchronisation (``None``: use
            ``group`` on the context's device, as on gloo runs).
        timeout_s: The rendezvous and collective timeout [s] the groups were made with.
        host_staging: The rank computes on a GPU but its backend (gloo) moves host memory:
            halo rows are copied to the host, exchanged there and copied back (ranks sharing
            a GPU; gloo's collectives stage CUDA tensors themselves).
    """

    group_rank: int
    group_size: int
    group: dist.ProcessGroup | None
    device: torch.device
    backend: str = "gloo"
    global_rank: int = 0
    global_world_size: int = 1
    local_rank: int = 0
    data_parallel_group: dist.ProcessGroup | None = None
    launcher: str = "single"
    gradient_group: dist.ProcessGroup | None = None
    control_group: dist.ProcessGroup | None = None
    timeout_s: float = 300.0
    host_staging: bool = False

    @property
    def is_main(self) -> bool:
        """True on the process that prints and writes files (global rank 0)."""
        return self.global_rank == 0

    @property
    def n_graph_groups(self) -> int:
        """Number of graph-parallel groups (data-parallel replicas)."""
        return self.global_world_size // self.group_size

    @property
    def rank(self) -> int:
        """The old name of :attr:`group_rank` (kept for code written against it; it was never
        ``torch.distributed``'s rank, which is :attr:`global_rank`)."""
        warnings.warn(
            "DistContext.rank is DistContext.group_rank (the rank in the graph group)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.group_rank

    @property
    def world_size(self) -> int:
        """The old name of :attr:`group_size` (the graph group's size, not the job's:
        :attr:`global_world_size`)."""
        warnings.warn(
            "DistContext.world_size is DistContext.group_size (the graph group's size)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.group_size

    @classmethod
    def one_process(cls, device: torch.device | str = "cpu") -> DistContext:
        """The context of a process that works alone (no process group), on ``device``."""
        return cls(group_rank=0, group_size=1, group=None, device=torch.device(device))
