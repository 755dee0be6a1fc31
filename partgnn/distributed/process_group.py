"""Start ``torch.distributed`` the same way under torchrun, mpirun, srun or a plain ``python``.

:func:`detect_launcher` reads who started this process from its environment (a pure function);
:func:`init_distributed` does the rendezvous and returns the :class:`DistContext` that every
distributed function receives; :func:`destroy_distributed` tears it down.

Launcher precedence, when the environment holds variables of several launchers (first match wins):

1. ``torchrun`` - ``TORCHELASTIC_RUN_ID`` is set (torchrun sets it for every worker). It beats
   everything because torchrun is always the innermost launcher: ``srun torchrun ...`` runs one
   torchrun per node, and there ``SLURM_PROCID`` counts nodes, not processes.
2. ``env`` - ``RANK`` and ``WORLD_SIZE`` are set (with ``MASTER_ADDR`` and ``MASTER_PORT``; an
   optional ``LOCAL_RANK``, default 0): explicit per-process values beat inferred ones.
3. ``mpi`` (started by an mpirun) - a variable that only an mpirun's process manager sets:
   ``MPI_LOCALRANKID`` (MPICH / Intel MPI Hydra), ``OMPI_COMM_WORLD_RANK`` (Open MPI),
   ``MV2_COMM_WORLD_RANK`` (MVAPICH). It beats Slurm because inside an allocation mpirun starts
   its per-node proxies with ``srun``, so the ranks inherit that step's ``SLURM_PROCID``, which
   numbers nodes, not ranks.
4. ``slurm`` - inside an ``srun`` job step: ``SLURM_PROCID`` and ``SLURM_STEP_ID`` are set (the
   batch, extern and interactive steps do not count). ``srun --mpi=pmi2|pmix`` also sets
   ``PMI_RANK``/``PMIX_RANK``, with the same numbers, so that case is Slurm and needs no mpi4py.
   A batch script run by ``sbatch`` without ``srun`` has ``SLURM_PROCID=0`` whatever
   ``SLURM_NTASKS`` says, and no step id: it is *one* process and falls through to ``single``
   (or to ``mpi`` when an mpirun inside the allocation started it).
5. ``mpi`` (PMI only) - ``PMI_RANK`` or ``PMIX_RANK`` without the above (``mpiexec.gforker``,
   Flux, other PMI process managers).
6. ``single`` - none of them: one process, world size 1.

The decision uses only variables that are the same kind on every rank of a job, so all ranks
pick the same launcher (a split decision would leave half of them waiting for a rendezvous that
never comes).

Environment variables read by :func:`init_distributed` besides the launchers' own:
``PARTGNN_DIST_TIMEOUT`` (seconds, when ``timeout_s`` is not given). ``MASTER_ADDR`` /
``MASTER_PORT`` override the rendezvous address under MPI and Slurm too.
"""

from __future__ import annotations

import datetime
import fcntl
import ipaddress
import math
import os
import re
import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.distributed as dist

from partgnn.distributed.context import DistContext
from partgnn.errors import InputError, first_line

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "DistributedError",
    "LaunchInfo",
    "destroy_distributed",
    "detect_launcher",
    "expand_hostlist",
    "init_distributed",
]

DEFAULT_TIMEOUT_S = 300.0
"""Rendezvous and collective timeout when neither ``timeout_s`` nor PARTGNN_DIST_TIMEOUT is set."""

TIMEOUT_ENV = "PARTGNN_DIST_TIMEOUT"

# Variables that only an mpirun's own process manager sets (see the module docstring, rule 3).
_MPIRUN_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK", "MPI_LOCALRANKID")
_MPI_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
_MPI_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "PMI_SIZE")
_MPI_LOCAL_RANK_VARS = (
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MV2_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
)

# Slurm numbers its special steps from 0xFFFFFFF0 up (interactive, pending, batch, extern):
# none of them is an ``srun`` launch of this program's tasks.
_SLURM_FIRST_SPECIAL_STEP = 0xFFFFFFF0
_SLURM_NODELIST_VARS = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
_SLURM_PORT_BASE = 20000
_SLURM_PORT_SPAN = 20000


class DistributedError(RuntimeError):
    """The process group could not be set up (rendezvous failed or timed out, port taken, ...).

    The message is one line naming the launcher, this rank and the rendezvous address.
    """


@dataclass(frozen=True)
class LaunchInfo:
    """Who started this process, read from the environment by :func:`detect_launcher`.

    Attributes:
        launcher: ``"torchrun"``, ``"mpi"``, ``"slurm"``, ``"env"`` or ``"single"``.
        rank: Global rank of this process.
        world_size: Number of processes in the job; ``None`` only under MPI when no size
            variable is set (PMIx alone); :func:`init_distributed` then asks MPI.
        local_rank: Rank among the processes on this node; ``None`` only under MPI when the
            process manager does not say, and then computed from MPI's shared-memory split.
        master_addr: Host of the rendezvous store (rank 0), when the environment fixes it.
        master_port: Port of the rendezvous store, when the environment fixes it.
    """

    launcher: str
    rank: int
    world_size: int | None
    local_rank: int | None
    master_addr: str | None = None
    master_port: int | None = None


def detect_launcher(environ: Mapping[str, str] | None = None) -> LaunchInfo:
    """Find out how this process was launched, from environment variables only.

    Args:
        environ: The environment to read (default: ``os.environ``); tests pass a dict.

    Returns:
        The launcher and this process's rank, world size, local rank and rendezvous address
        (precedence rules: see the module docstring).

    Raises:
        InputError: A launcher is recognised but one of its variables is missing or malformed,
            or the Slurm rendezvous host cannot be derived.
    """
    env = os.environ if environ is None else environ

    if env.get("TORCHELASTIC_RUN_ID"):
        return _explicit_env(env, "torchrun")
    if "RANK" in env and "WORLD_SIZE" in env:
        return _explicit_env(env, "env")
    if any(name in env for name in _MPIRUN_RANK_VARS):
        return _mpi_env(env)
    if _in_slurm_step(env):
        return _slurm_env(env)
    if "PMI_RANK" in env or "PMIX_RANK" in env:
        return _mpi_env(env)
    return LaunchInfo("single", rank=0, world_size=1, local_rank=0)


def init_distributed(
    *,
    device: str | torch.device = "auto",
    backend: str | None = None,
    timeout_s: float | None = None,
    graph_parallel_size: int | None = None,
    environ: Mapping[str, str] | None = None,
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
    holds the ranks at the same position in every graph group. ``DistContext.rank`` and
    ``world_size`` are within the graph group.

    Args:
        device: ``"auto"`` (``cuda:<local_rank % device_count>`` when CUDA is available, else
            ``cpu``), ``"cpu"``, ``"cuda"`` (local rank modulo the visible GPUs) or ``"cuda:N"``.
        backend: Default ``"nccl"`` on CUDA, ``"gloo"`` on CPU.
        timeout_s: Limit in seconds for the rendezvous and for every later collective of these
            groups, so a dead or missing peer makes the others fail instead of hanging (a rank
            that cannot reach rank 0's store gives up after about twice this, as torch retries
            the connection once). Default: ``PARTGNN_DIST_TIMEOUT`` or 300.
        graph_parallel_size: ``P``, the ranks that share one event graph; must divide the world
            size. Default: the whole world (one graph group, no data parallelism).
        environ: Environment to read instead of ``os.environ`` (tests). Under torchrun the
            ``env://`` rendezvous still reads ``os.environ``.

    Returns:
        The context of this process: its graph-parallel ``group`` (``None``, the default group,
        when ``P`` is the world size) and ``data_parallel_group`` (``None`` with one graph group).

    Raises:
        InputError: Bad arguments or launcher variables (device, backend, sizes, timeout), or
            mpi4py missing under MPI.
        DistributedError: The rendezvous or the group creation failed or timed out.

    .. warning::
        Collective: every process of the job must call it, with the same
        ``graph_parallel_size``.

    .. note::
        CUDA / NCCL: one process per GPU. With ``device="auto"`` a process uses GPU
        ``local_rank % torch.cuda.device_count()``, which is right both when every process sees
        all GPUs of its node and when the scheduler shows each task only its own
        (``--gpus-per-task=1``). ``torch.cuda.set_device`` is called before the rendezvous and
        ``device_id`` is given to NCCL, so its communicator is created eagerly, subgroups are
        split from it, and later batched point-to-point calls find it ready. A NCCL collective
        that exceeds the timeout is caught by PyTorch's watchdog thread, which by default aborts
        the process (``TORCH_NCCL_ASYNC_ERROR_HANDLING``) rather than raising in Python: the job
        still ends instead of hanging. Across nodes, gloo and NCCL choose their network
        interface from the host name; set ``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME`` if it
        resolves to a loopback or wrong interface.
    """
    env = os.environ if environ is None else environ
    if not dist.is_available():
        raise DistributedError("this torch build has no torch.distributed support")
    if dist.is_initialized():
        raise DistributedError(
            "torch.distributed is already initialised; call destroy_distributed() first"
        )
    timeout = datetime.timedelta(seconds=_resolve_timeout(timeout_s, env))
    info = detect_launcher(env)

    comm = None
    if info.launcher == "mpi":
        comm = _mpi_comm_world(info)
        info = _complete_from_mpi(info, comm)
    assert info.world_size is not None and info.local_rank is not None
    world_size, global_rank, local_rank = info.world_size, info.rank, info.local_rank

    group_size = _check_graph_parallel_size(graph_parallel_size, world_size, info.launcher)
    torch_device = resolve_device(device, local_rank)
    backend = _resolve_backend(backend, torch_device)
    if torch_device.type == "cuda":
        # Before the rendezvous: NCCL binds its communicator to the current device.
        torch.cuda.set_device(torch_device)

    where = f"launcher {info.launcher}, rank {global_rank} of {world_size}"
    store, init_method, address = _rendezvous(info, comm, timeout, where)
    if backend == "gloo" and "GLOO_SOCKET_IFNAME" not in os.environ and info.master_addr:
        interface = interface_towards(info.master_addr)
        if interface is not None:
            # gloo otherwise binds to the address its host name resolves to, which on a
            # multi-homed host (or a network namespace) may not be the one peers can reach.
            os.environ["GLOO_SOCKET_IFNAME"] = interface
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
        group, data_parallel_group, gradient_group = _build_groups(
            global_rank, world_size, group_size, timeout
        )
    except (RuntimeError, ValueError, OSError) as err:
        if dist.is_initialized():
            dist.destroy_process_group()
        raise DistributedError(
            f"could not initialise torch.distributed ({where}, timeout "
            f"{timeout.total_seconds():g} s): {first_line(err)}"
        ) from err

    return DistContext(
        rank=global_rank % group_size,
        world_size=group_size,
        group=group,
        device=torch_device,
        backend=backend,
        global_rank=global_rank,
        global_world_size=world_size,
        local_rank=local_rank,
        data_parallel_group=data_parallel_group,
        launcher=info.launcher,
        gradient_group=gradient_group,
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


def expand_hostlist(hostlist: str) -> list[str]:
    """Expand a Slurm host list such as ``"gpu[01-03,07],login1"`` into host names.

    Supports several bracket groups per name (``"r[1-2]n[01-02]"``), comma-separated items and
    ranges, and keeps zero padding (the width of a range's lower bound), like
    ``scontrol show hostnames`` (not called, so it works where Slurm's tools are absent).

    Args:
        hostlist: The compressed list (``SLURM_STEP_NODELIST``, ``SLURM_JOB_NODELIST``).

    Returns:
        The host names, in order.

    Raises:
        InputError: Unbalanced brackets or a range that is not ``<int>-<int>``.
    """
    hosts: list[str] = []
    for item in _split_outside_brackets(hostlist.strip()):
        if item:
            hosts.extend(_expand_host_item(item, hostlist))
    return hosts


# --- launcher environments ------------------------------------------------------------------


def _explicit_env(env: Mapping[str, str], launcher: str) -> LaunchInfo:
    """torchrun or hand-set variables: RANK, WORLD_SIZE, MASTER_ADDR/PORT, optional LOCAL_RANK."""
    missing = [n for n in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if not env.get(n)]
    if missing:
        raise InputError(
            f"launcher {launcher}: environment variable(s) {', '.join(missing)} missing "
            "(set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT together)"
        )
    world_size = _env_int(env, "WORLD_SIZE", minimum=1)
    rank = _env_int(env, "RANK", minimum=0)
    _check_rank(rank, world_size, "RANK", "WORLD_SIZE")
    local_rank = _env_int(env, "LOCAL_RANK", minimum=0) if "LOCAL_RANK" in env else 0
    return LaunchInfo(
        launcher,
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        master_addr=env["MASTER_ADDR"],
        master_port=_env_port(env, "MASTER_PORT"),
    )


def _mpi_env(env: Mapping[str, str]) -> LaunchInfo:
    """Rank and size as the MPI process manager exports them (checked again against MPI)."""
    rank_var = next((n for n in _MPI_RANK_VARS if n in env), None)
    size_var = next((n for n in _MPI_SIZE_VARS if n in env), None)
    rank, world_size = 0, None
    if rank_var is not None:  # Else only MPI_LOCALRANKID: MPI gives rank and size in init.
        rank = _env_int(env, rank_var, minimum=0)
        if size_var is not None:
            world_size = _env_int(env, size_var, minimum=1)
            _check_rank(rank, world_size, rank_var, size_var)
    local_var = next((n for n in _MPI_LOCAL_RANK_VARS if n in env), None)
    local_rank = _env_int(env, local_var, minimum=0) if local_var else None
    port = _env_port(env, "MASTER_PORT") if env.get("MASTER_PORT") else None
    return LaunchInfo(
        "mpi",
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        master_addr=env.get("MASTER_ADDR") or None,
        master_port=port,
    )


def _in_slurm_step(env: Mapping[str, str]) -> bool:
    """True inside a task started by ``srun`` (not the batch script, nor salloc's shell)."""
    step = env.get("SLURM_STEP_ID", env.get("SLURM_STEPID"))
    if "SLURM_PROCID" not in env or step is None:
        return False
    try:
        return int(step) < _SLURM_FIRST_SPECIAL_STEP
    except ValueError:
        return False


def _slurm_env(env: Mapping[str, str]) -> LaunchInfo:
    """srun task: rank, size and local rank from Slurm; rendezvous on the first host."""
    size_var = "SLURM_STEP_NUM_TASKS" if "SLURM_STEP_NUM_TASKS" in env else "SLURM_NTASKS"
    if size_var not in env:
        raise InputError("launcher slurm: SLURM_PROCID is set but SLURM_NTASKS is missing")
    world_size = _env_int(env, size_var, minimum=1)
    rank = _env_int(env, "SLURM_PROCID", minimum=0)
    _check_rank(rank, world_size, "SLURM_PROCID", size_var)
    local_rank = _env_int(env, "SLURM_LOCALID", minimum=0) if "SLURM_LOCALID" in env else 0

    addr = env.get("MASTER_ADDR") or None
    if addr is None and world_size > 1:
        nodelist_var = next((n for n in _SLURM_NODELIST_VARS if n in env), None)
        hosts = expand_hostlist(env[nodelist_var]) if nodelist_var else []
        if not hosts:
            raise InputError(
                "launcher slurm: no node list (SLURM_STEP_NODELIST / SLURM_JOB_NODELIST) "
                "to find the rendezvous host; set MASTER_ADDR"
            )
        addr = hosts[0]

    port = _env_port(env, "MASTER_PORT") if env.get("MASTER_PORT") else None
    if port is None and world_size > 1:
        if "SLURM_JOB_ID" not in env:
            raise InputError("launcher slurm: SLURM_JOB_ID is missing; set MASTER_PORT")
        job_id = _env_int(env, "SLURM_JOB_ID", minimum=0)
        step_id = _env_int(env, "SLURM_STEP_ID", minimum=0) if "SLURM_STEP_ID" in env else 0
        # Same on every task of the step, different for steps running side by side in a job.
        port = _SLURM_PORT_BASE + (job_id + 997 * step_id) % _SLURM_PORT_SPAN
    return LaunchInfo(
        "slurm",
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        master_addr=addr,
        master_port=port,
    )


def _env_int(env: Mapping[str, str], name: str, *, minimum: int) -> int:
    raw = env.get(name, "")
    try:
        value = int(raw.strip())
    except ValueError:
        raise InputError(f"environment variable {name}={raw!r} is not an integer") from None
    if value < minimum:
        raise InputError(f"environment variable {name}={value} must be >= {minimum}")
    return value


def _env_port(env: Mapping[str, str], name: str) -> int:
    port = _env_int(env, name, minimum=0)
    if port > 65535:
        raise InputError(f"environment variable {name}={port} is not a TCP port (0-65535)")
    return port


def _check_rank(rank: int, world_size: int, rank_var: str, size_var: str) -> None:
    if rank >= world_size:
        raise InputError(
            f"environment variable {rank_var}={rank} is not below {size_var}={world_size}"
        )


def _split_outside_brackets(text: str) -> list[str]:
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return items


def _expand_host_item(item: str, hostlist: str) -> list[str]:
    open_at = item.find("[")
    if open_at < 0:
        if "]" in item:
            raise InputError(f"Slurm host list {hostlist!r}: unbalanced ']'")
        return [item]
    close_at = item.find("]", open_at)
    if close_at < 0 or "[" in item[open_at + 1 : close_at]:
        raise InputError(f"Slurm host list {hostlist!r}: unbalanced '['")
    prefix, body, rest = item[:open_at], item[open_at + 1 : close_at], item[close_at + 1 :]
    tails = _expand_host_item(rest, hostlist)
    hosts = []
    for part in body.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
        if match is None:
            raise InputError(f"Slurm host list {hostlist!r}: bad range {part!r} in brackets")
        low, high = match.group(1), match.group(2) or match.group(1)
        if int(high) < int(low):
            raise InputError(f"Slurm host list {hostlist!r}: range {part!r} runs backwards")
        for number in range(int(low), int(high) + 1):
            hosts.extend(f"{prefix}{number:0{len(low)}d}{tail}" for tail in tails)
    return hosts


# --- MPI ---------------------------------------------------------------------------------------


def _mpi_comm_world(info: LaunchInfo) -> Any:
    """``MPI.COMM_WORLD``; importing mpi4py initialises MPI, so only done under MPI."""
    try:
        from mpi4py import MPI
    except ImportError:
        raise InputError(
            f"launched under MPI (rank {info.rank}) but mpi4py is not installed: "
            "pip install mpi4py (built against the MPI that mpirun belongs to)"
        ) from None
    return MPI.COMM_WORLD


def _complete_from_mpi(info: LaunchInfo, comm: Any) -> LaunchInfo:
    """MPI's own rank and size are authoritative; the local rank comes from a node split."""
    from mpi4py import MPI

    rank, size = comm.Get_rank(), comm.Get_size()
    # A disagreement usually means mpi4py is built for another MPI than the mpirun used: each
    # process then sees itself alone, as rank 0 of 1.
    if info.world_size is not None and (info.world_size != size or info.rank != rank):
        raise InputError(
            f"launcher mpi: the environment says rank {info.rank} of {info.world_size}, "
            f"MPI says rank {rank} of {size} (mpi4py built for another MPI than mpirun's?)"
        )
    # Collective on every rank, needed or not, so that no rank waits for the others here.
    node_comm = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
    local_rank = node_comm.Get_rank() if info.local_rank is None else info.local_rank
    one_node = node_comm.Get_size() == size
    node_comm.Free()
    # Remember whether the job fits on one node in the address: loopback is then enough.
    addr = info.master_addr or ("127.0.0.1" if one_node else None)
    return replace(info, rank=rank, world_size=size, local_rank=local_rank, master_addr=addr)


def _mpi_rendezvous(
    info: LaunchInfo, comm: Any, timeout: datetime.timedelta
) -> tuple[dist.Store, str]:
    """Rank 0 binds a port and broadcasts ``(addr, port)``; every rank returns its store."""
    assert info.world_size is not None
    listener = None
    payload: tuple[str, str | int] = ("", 0)
    if info.rank == 0:
        try:
            addr = info.master_addr or _routable_address(comm)
            listener = _listen(addr, info.master_port or 0)
            payload = (addr, listener.getsockname()[1])
        except OSError as err:
            # Broadcast the failure too: the other ranks would wait in bcast forever otherwise.
            payload = ("error", f"rank 0 could not open a rendezvous port: {first_line(err)}")
    else:
        if info.master_addr is None:
            _routable_address(comm)  # The gather inside is collective.
    addr, port = comm.bcast(payload, root=0)
    if addr == "error":
        raise DistributedError(f"launcher mpi, rank {info.rank}: {port}")
    return _tcp_store(str(addr), int(port), info, timeout, listener), f"{addr}:{port}"


def _routable_address(comm: Any) -> str:
    """Rank 0's address as seen from the other nodes: the source of a route to one of them."""
    hosts = comm.gather(socket.gethostname(), root=0)
    if comm.Get_rank() != 0:
        return ""
    mine = hosts[0]
    peer = next((h for h in hosts if h != mine), None)
    if peer is not None:
        try:
            # A UDP "connect" sends nothing; it only asks the kernel which interface routes there.
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                probe.connect((peer, 9))
                return str(probe.getsockname()[0])
        except OSError:
            pass
    return socket.gethostbyname(socket.getfqdn())


def interface_towards(address: str) -> str | None:
    """The network interface this host reaches ``address`` through (Linux), or ``None`` when
    ``address`` is loopback or the interface cannot be told.

    partgnn sets ``GLOO_SOCKET_IFNAME`` to it (unless it is set) before gloo starts.
    """
    try:
        target = socket.getaddrinfo(address, None, socket.AF_INET)[0][4][0]
        if ipaddress.ip_address(target).is_loopback:
            return None
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((target, 9))  # UDP: sends nothing, only picks the route
            source = probe.getsockname()[0]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as query:
            for _, name in socket.if_nameindex():
                request = struct.pack("256s", name.encode()[:15])
                try:
                    answer = fcntl.ioctl(query.fileno(), _SIOCGIFADDR, request)
                except OSError:  # no IPv4 address on it
                    continue
                if socket.inet_ntoa(answer[20:24]) == source and name != "lo":
                    return name
    except (OSError, ValueError, IndexError):
        return None
    return None


#: ioctl request for an interface's IPv4 address (linux/sockios.h).
_SIOCGIFADDR = 0x8915


# --- rendezvous ----------------------------------------------------------------------------


def _rendezvous(
    info: LaunchInfo, comm: Any, timeout: datetime.timedelta, where: str
) -> tuple[dist.Store | None, str | None, str]:
    """The store (or ``init_method``) to initialise with, and the address for error messages."""
    assert info.world_size is not None
    if info.launcher == "torchrun":
        address = f"{info.master_addr}:{info.master_port}"
        if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
            return None, "env://", address
        # torchrun's agent already serves a store on MASTER_PORT, and keeps it across restarts
        # (--max-restarts): keys of the killed attempt (gloo's peer addresses among them) are
        # still there, and env:// would read them (torch 2.13: "connectFullMesh failed ...
        # Connection refused"). Each restart attempt gets a key space of its own.
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        assert info.master_addr is not None and info.master_port is not None
        try:
            client = dist.TCPStore(
                info.master_addr, info.master_port, info.world_size, False, timeout=timeout
            )
        except (RuntimeError, OSError) as err:
            raise DistributedError(
                f"rendezvous failed ({where}, torchrun's store {address}): {first_line(err)}"
            ) from err
        return dist.PrefixStore(f"partgnn/attempt_{attempt}/", client), None, address
    if info.world_size == 1:
        # Nothing to meet: an in-memory store, no port, same init_process_group call.
        return dist.HashStore(), None, "in-process"
    try:
        if info.launcher == "mpi":
            store, address = _mpi_rendezvous(info, comm, timeout)
            return store, None, address
        assert info.master_addr is not None and info.master_port is not None
        listener = _listen(info.master_addr, info.master_port) if info.rank == 0 else None
        store = _tcp_store(info.master_addr, info.master_port, info, timeout, listener)
        return store, None, f"{info.master_addr}:{info.master_port}"
    except DistributedError:
        raise
    except (RuntimeError, OSError) as err:
        address = f"{info.master_addr}:{info.master_port}"
        hint = "; set MASTER_PORT to a free port" if isinstance(err, OSError) else ""
        raise DistributedError(
            f"rendezvous failed ({where}, address {address}, timeout "
            f"{timeout.total_seconds():g} s): {first_line(err)}{hint}"
        ) from err


def _listen(addr: str, port: int) -> socket.socket:
    """A listening socket for rank 0's store: loopback only when the address is loopback."""
    if addr == "127.0.0.1":
        return socket.create_server(("127.0.0.1", port))
    if socket.has_dualstack_ipv6():
        # Either family may come: MASTER_ADDR can be a name that peers resolve to IPv6.
        return socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True)
    return socket.create_server(("", port))


def _tcp_store(
    addr: str,
    port: int,
    info: LaunchInfo,
    timeout: datetime.timedelta,
    listener: socket.socket | None,
) -> dist.Store:
    """Rank 0 serves the store on its already-bound socket; the others connect to it."""
    assert info.world_size is not None
    if listener is None:
        return dist.TCPStore(addr, port, info.world_size, False, timeout=timeout)
    # The store takes ownership of the descriptor (libuv closes it), hence detach().
    return dist.TCPStore(
        addr,
        port,
        info.world_size,
        True,
        timeout=timeout,
        wait_for_workers=False,
        master_listen_fd=listener.detach(),
    )


# --- options -----------------------------------------------------------------------------------


def _resolve_timeout(timeout_s: float | None, env: Mapping[str, str]) -> float:
    source = "timeout_s"
    if timeout_s is None:
        raw = env.get(TIMEOUT_ENV)
        if raw is None:
            return DEFAULT_TIMEOUT_S
        source = TIMEOUT_ENV
        try:
            timeout_s = float(raw)
        except ValueError:
            raise InputError(f"{TIMEOUT_ENV}={raw!r} is not a number of seconds") from None
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise InputError(f"{source} must be a positive number of seconds (got {timeout_s})")
    return float(timeout_s)


def _check_graph_parallel_size(size: int | None, world_size: int, launcher: str) -> int:
    if size is None:
        return world_size
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise InputError(f"graph_parallel_size must be a positive integer (got {size!r})")
    if world_size % size:
        raise InputError(
            f"graph_parallel_size {size} does not divide the world size {world_size} "
            f"(launcher {launcher}): start a multiple of {size} processes"
        )
    return size


def resolve_device(device: str | torch.device, local_rank: int) -> torch.device:
    """The device a ``run.device`` spec names for the process of ``local_rank`` on its node.

    Raises:
        InputError: The spec is malformed, or names CUDA where there is none (or not that one).
    """
    spec = str(device).strip().lower()
    if spec == "auto":
        spec = "cuda" if torch.cuda.is_available() else "cpu"
    if spec == "cpu":
        return torch.device("cpu")
    if not re.fullmatch(r"cuda(:\d+)?", spec):
        raise InputError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N' (got {device!r})")
    if not torch.cuda.is_available():
        raise InputError(f"device {device!r} requested but CUDA is not available here")
    count = torch.cuda.device_count()
    if spec == "cuda":
        return torch.device("cuda", local_rank % count)
    index = int(spec.split(":")[1])
    if index >= count:
        raise InputError(f"device {device!r}: only {count} CUDA device(s) are visible")
    return torch.device("cuda", index)


def _resolve_backend(backend: str | None, device: torch.device) -> str:
    if backend is None:
        return "nccl" if device.type == "cuda" else "gloo"
    backend = backend.strip().lower()
    if backend == "nccl":
        if device.type != "cuda":
            raise InputError(f"backend 'nccl' needs a CUDA device (device is {device})")
        if not dist.is_nccl_available():
            raise InputError("backend 'nccl' requested but this torch build has no NCCL")
    return backend


def _build_groups(
    global_rank: int, world_size: int, group_size: int, timeout: datetime.timedelta
) -> tuple[dist.ProcessGroup | None, dist.ProcessGroup | None, dist.ProcessGroup | None]:
    """This rank's graph-parallel, data-parallel and gradient groups.

    The gradient group has the graph group's ranks; gradients reduced in it while the backward
    pass runs never interleave with that pass's halo exchanges (a group's collectives must be
    issued in the same order on every rank). ``None``: the default group (graph), no data
    parallelism (data), one process (gradient).
    """
    n_groups = world_size // group_size
    graph_ranks = [list(range(g * group_size, (g + 1) * group_size)) for g in range(n_groups)]
    # new_group is collective over the whole world: every rank creates every group, in the
    # same order, and keeps those it belongs to.
    gradient_groups = [
        dist.new_group(ranks, timeout=timeout) for ranks in graph_ranks if group_size > 1
    ]
    gradient_group = gradient_groups[global_rank // group_size] if gradient_groups else None
    if n_groups == 1:
        return None, None, gradient_group
    graph_groups = [dist.new_group(ranks, timeout=timeout) for ranks in graph_ranks]
    data_groups = [
        dist.new_group([g * group_size + r for g in range(n_groups)], timeout=timeout)
        for r in range(group_size)
    ]
    return (
        graph_groups[global_rank // group_size],
        data_groups[global_rank % group_size],
        gradient_group,
    )
