"""Start ``torch.distributed`` the same way under torchrun, mpirun, srun or a plain ``python``.

:func:`init_distributed` reads who started this process (:mod:`~partgnn.distributed.launch_env`),
meets the other processes (:mod:`~partgnn.distributed.rendezvous`), picks the device and backend
(:mod:`~partgnn.distributed.device`), builds the process groups
(:mod:`~partgnn.distributed.groups`) and returns the :class:`DistContext` that every distributed
function receives; :func:`destroy_distributed` tears it down.

Environment variables read by :func:`init_distributed` besides the launchers' own:
``PARTGNN_DIST_TIMEOUT`` (seconds: above a config's ``run.timeout_s`` and a command's default,
below its ``--timeout``). ``MASTER_ADDR`` /
``MASTER_PORT`` override the rendezvous address under MPI and Slurm too.
"""

from __future__ import annotations

import datetime
import math
import os
import sys
import warnings
from collections.abc import Mapping

import torch
import torch.distributed as dist

from partgnn.distributed.context import DistContext
from partgnn.distributed.device import (
    check_ranks_per_gpu,
    duplicate_gpu_message,
    ranks_sharing_a_gpu,
    resolve_backend,
    resolve_device,
)
from partgnn.distributed.groups import (
    build_control_group,
    build_groups,
    check_group_size,
)
from partgnn.distributed.launch_env import LaunchInfo, detect_launcher, expand_hostlist
from partgnn.distributed.rendezvous import (
    DistributedError,
    complete_from_mpi,
    mpi_comm_world,
    rendezvous,
    socket_interface_variables,
)
from partgnn.errors import InputError, first_line

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "MIN_TIMEOUT_S",
    "DistributedError",
    "LaunchInfo",
    "destroy_distributed",
    "detect_launcher",
    "expand_hostlist",
    "init_distributed",
    "resolve_device",
    "resolve_timeout",
]

DEFAULT_TIMEOUT_S = 300.0
"""Rendezvous and collective timeout when no option, environment or config sets one."""

MIN_TIMEOUT_S = 1.0
"""The shortest timeout accepted: below it even a healthy rendezvous fails."""

TIMEOUT_ENV = "PARTGNN_DIST_TIMEOUT"


def init_distributed(
    *,
    device: str | torch.device = "auto",
    backend: str | None = None,
    timeout_s: float | None = None,
    default_timeout_s: float = DEFAULT_TIMEOUT_S,
    default_timeout_source: str = "run.timeout_s",
    group_size: int | None = None,
    environ: Mapping[str, str] | None = None,
    control_group: bool | None = None,
    graph_parallel_size: int | None = None,
) -> DistContext:
    """Initialise ``torch.distributed`` for this process and return its context.

    Every process of the job calls it once, before any other distributed function. A single
    process (no launcher) gets a real world-size-1 group, so the code paths are the same.

    Rendezvous: torchrun uses ``env://`` (and so torchrun's own store); ``env`` and Slurm
    connect to ``MASTER_ADDR:MASTER_PORT`` (Slurm: default the first host of the step's node list
    and port ``20000 + (SLURM_JOB_ID + 997 * SLURM_STEP_ID) % 20000``); under MPI, rank 0 binds a
    free port (or ``MASTER_PORT``) on its node, and broadcasts ``addr:port`` over
    ``MPI.COMM_WORLD`` with mpi4py (imported only then). Rank 0 keeps the socket it bound and
    hands it to the store, so no other process can take the port in between (a Slurm port derived
    from the job id can still be taken by someone else: the error then says to set
    ``MASTER_PORT``). The MPI address is ``MASTER_ADDR`` if set, ``127.0.0.1`` when all ranks
    share a node, otherwise the source address of rank 0's route to another rank's host (falling
    back to its resolved host name; set ``MASTER_ADDR`` where that is a loopback address).

    Graph parallelism: the ``W`` processes form ``W / P`` graph-parallel groups of ``P``
    consecutive global ranks (``[0, P)``, ``[P, 2P)``, ...); the data-parallel group of a process
    holds the ranks at the same position in every graph group. ``DistContext.group_rank`` and
    ``group_size`` are within the graph group.

    Args:
        device: ``"auto"`` (``cuda:<local_rank % device_count>`` when CUDA is available, else
            ``cpu``), ``"cpu"``, ``"cuda"`` (local rank modulo the visible GPUs) or ``"cuda:N"``.
        backend: ``"auto"`` (or ``None``): ``"nccl"`` on CUDA, ``"gloo"`` on CPUs and where
            torchrun starts more ranks per node than it has GPUs (they then share the GPUs,
            compute on them and exchange halo rows through host memory); or ``"nccl"``,
            ``"gloo"``.
        timeout_s: Limit in seconds for the rendezvous and for every later collective of these
            groups, so a dead or missing peer makes the others fail instead of hanging (a rank
            that cannot reach rank 0's store gives up after about twice this, as torch retries
            the connection once). One order of precedence (:func:`resolve_timeout`): this
            argument (a command's ``--timeout``), else ``PARTGNN_DIST_TIMEOUT``, else
            ``default_timeout_s`` (a run config's ``run.timeout_s``, a command's default).
        default_timeout_s: The timeout when neither ``timeout_s`` nor the environment sets one.
        default_timeout_source: What ``default_timeout_s`` is, for the error of a bad one.
        group_size: ``P``, the ranks of a graph group (they share one event graph); must divide
            the world size. Default: the whole world (one graph group, no data parallelism).
        environ: Environment to read instead of ``os.environ`` (tests). Under torchrun the
            ``env://`` rendezvous still reads ``os.environ``.
        graph_parallel_size: The former name of ``group_size`` (a DeprecationWarning).

    Returns:
        The context of this process: its graph-parallel ``group`` (``None``, the default group,
        when ``P`` is the world size) and ``data_parallel_group`` (``None`` with one graph group).

    Raises:
        InputError: Bad arguments or launcher variables (device, backend, sizes, timeout), or
            mpi4py missing under MPI.
        DistributedError: The rendezvous or the group creation failed or timed out.

    .. warning::
        Collective: every process of the job must call it, with the same ``group_size``.

    .. note::
        CUDA / NCCL: one process per GPU. With ``device="auto"`` a process uses GPU
        ``local_rank % torch.cuda.device_count()``, which is right both when every process sees
        all GPUs of its node and when the scheduler shows each task only its own
        (``--gpus-per-task=1``); under torchrun, more processes per node than visible GPUs
        are refused in one line before the rendezvous, and elsewhere NCCL's "Duplicate GPU
        detected" is reported as such. ``torch.cuda.set_device`` is called before the rendezvous and
        ``device_id`` is given to NCCL, so its communicator is created eagerly, subgroups are
        split from it, and later batched point-to-point calls find it ready. A NCCL collective
        that exceeds the timeout is caught by PyTorch's watchdog thread, which by default aborts
        the process (``TORCH_NCCL_ASYNC_ERROR_HANDLING``) rather than raising in Python: the job
        still ends instead of hanging. Across nodes, gloo and NCCL would choose their network
        interface from the host name; unless ``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME`` is
        set, each rank sets the one of its backend to the interface towards the rendezvous
        host (:func:`~partgnn.distributed.rendezvous.socket_interface_variables`).
    """
    env = os.environ if environ is None else environ
    if not dist.is_available():
        raise DistributedError("this torch build has no torch.distributed support")
    if dist.is_initialized():
        raise DistributedError(
            "torch.distributed is already initialised; call destroy_distributed() first"
        )
    timeout_seconds = resolve_timeout(
        timeout_s, env, default_timeout_s, default_source=default_timeout_source
    )
    timeout = datetime.timedelta(seconds=timeout_seconds)
    info = detect_launcher(env)

    comm = None
    if info.launcher == "mpi":
        comm = mpi_comm_world(info)
        info = complete_from_mpi(info, comm)
    assert info.world_size is not None and info.local_rank is not None
    world_size, global_rank, local_rank = info.world_size, info.rank, info.local_rank

    if graph_parallel_size is not None:
        if group_size is not None:
            raise InputError(
                "init_distributed: graph_parallel_size is group_size's former name: give one"
            )
        warnings.warn(
            "init_distributed(graph_parallel_size=) is now group_size=", DeprecationWarning,
            stacklevel=2,
        )  # fmt: skip
        group_size = graph_parallel_size
    group_size = check_group_size(group_size, world_size, info.launcher)
    sharing = None
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        check_ranks_per_gpu(device, info.launcher, env, count, backend)
        sharing = ranks_sharing_a_gpu(device, info.launcher, env, count)
    torch_device = resolve_device(device, local_rank)
    backend = resolve_backend(backend, torch_device, ranks_share_gpu=sharing is not None)
    if sharing is not None and torch_device.type == "cuda" and global_rank == 0:
        print(
            f"partgnn: {sharing} ranks per node share {torch.cuda.device_count()} GPU(s): "
            f"backend gloo, halo rows staged through host memory (NCCL needs a GPU per rank)",
            file=sys.stderr,
        )
    if torch_device.type == "cuda":
        # Before the rendezvous: NCCL binds its communicator to the current device.
        torch.cuda.set_device(torch_device)

    where = f"launcher {info.launcher}, rank {global_rank} of {world_size}"
    store, init_method, address = rendezvous(info, comm, timeout, where)
    os.environ.update(socket_interface_variables(backend, info.master_addr, os.environ))
    where += f", rendezvous {address}, backend {backend}"
    try:
        dist.init_process_group(
            backend,
            init_method=init_method,
            store=store,
            rank=global_rank,
            world_size=world_size,
            timeout=timeout,
            # Eager NCCL init: fails here rather than in the first collective, and lets
            # new_group split the communicator and batch_isend_irecv find it.
            device_id=torch_device if backend == "nccl" else None,
        )
        group, data_parallel_group, gradient_group = build_groups(
            global_rank, world_size, group_size, timeout
        )
        control = None
        if control_group if control_group is not None else backend == "nccl":
            control = build_control_group(global_rank, world_size, group_size, timeout)
    except (RuntimeError, ValueError, OSError) as err:
        if dist.is_initialized():
            dist.destroy_process_group()
        duplicate = duplicate_gpu_message(err, torch_device)
        if duplicate is not None:
            raise DistributedError(f"{duplicate} ({where})") from err
        raise DistributedError(
            f"could not initialise torch.distributed ({where}, timeout "
            f"{timeout.total_seconds():g} s): {first_line(err)}"
        ) from err

    return DistContext(
        group_rank=global_rank % group_size,
        group_size=group_size,
        group=group,
        device=torch_device,
        backend=backend,
        global_rank=global_rank,
        global_world_size=world_size,
        local_rank=local_rank,
        data_parallel_group=data_parallel_group,
        launcher=info.launcher,
        gradient_group=gradient_group,
        control_group=control,
        timeout_s=timeout_seconds,
        host_staging=torch_device.type == "cuda" and backend == "gloo",
    )


def destroy_distributed(ctx: DistContext) -> None:
    """Destroy the default process group and every subgroup of ``ctx`` (no-op if none is live).

    Call it at the end of every rank's run, in a ``finally`` block; NCCL warns about leaked
    communicators otherwise. MPI itself is left to mpi4py, which finalises it at exit.

    Args:
        ctx: The context returned by :func:`init_distributed`.
    """
    del ctx  # Every group hangs off the default group; destroying that destroys them all.
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def resolve_timeout(
    option_s: float | None,
    env: Mapping[str, str],
    default_s: float = DEFAULT_TIMEOUT_S,
    *,
    default_source: str = "run.timeout_s",
) -> float:
    """The collective timeout [s]: the option, else ``PARTGNN_DIST_TIMEOUT``, else the default.

    Args:
        option_s: A command's ``--timeout`` (``None``: not given).
        env: The environment.
        default_s: The config's ``run.timeout_s`` or the command's default.
        default_source: What ``default_s`` is, for the error.

    Raises:
        InputError: The chosen value is not a finite number of at least :data:`MIN_TIMEOUT_S`
            seconds (one line naming where it came from).
    """
    value: float | str
    if option_s is not None:
        source, value = "--timeout", option_s
    elif env.get(TIMEOUT_ENV) is not None:
        source, value = TIMEOUT_ENV, env[TIMEOUT_ENV]
    else:
        source, value = default_source, default_s
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds >= MIN_TIMEOUT_S):
        shown = f"{source}={value!r}" if source == TIMEOUT_ENV else f"{source} {value!r}"
        raise InputError(f"{shown} is not a timeout: give a number of seconds >= {MIN_TIMEOUT_S:g}")
    return seconds
