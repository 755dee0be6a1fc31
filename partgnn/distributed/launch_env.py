"""Who started this process, read from its environment: torchrun, mpirun, srun or nothing.

:func:`detect_launcher` is a pure function of the environment; it returns the process's rank,
world size, local rank and (where the environment fixes it) the rendezvous address.

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
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from partgnn.errors import InputError

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
