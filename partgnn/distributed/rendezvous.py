"""Where the processes of a job meet: the store ``torch.distributed`` initialises from.

torchrun's own store (a key space per restart attempt), a TCP store on ``MASTER_ADDR:MASTER_PORT``
(``env`` and Slurm), or, under MPI, one on a port rank 0 binds and broadcasts with mpi4py. Also
the network interface gloo should use to reach the rendezvous host.
"""

from __future__ import annotations

import datetime
import fcntl
import ipaddress
import os
import socket
import struct
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch.distributed as dist

from partgnn.distributed.launch_env import LaunchInfo
from partgnn.errors import InputError, first_line


class DistributedError(RuntimeError):
    """The process group could not be set up (rendezvous failed or timed out, port taken, ...).

    The message is one line naming the launcher, this rank and the rendezvous address.
    """


# --- MPI ---------------------------------------------------------------------------------------


def mpi_comm_world(info: LaunchInfo) -> Any:
    """``MPI.COMM_WORLD``; importing mpi4py initialises MPI, so only done under MPI."""
    try:
        from mpi4py import MPI
    except ImportError:
        raise InputError(
            f"launched under MPI (rank {info.rank}) but mpi4py is not installed: "
            "pip install mpi4py (built against the MPI that mpirun belongs to)"
        ) from None
    return MPI.COMM_WORLD


def complete_from_mpi(info: LaunchInfo, comm: Any) -> LaunchInfo:
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


#: The variable each backend reads its network interface from.
SOCKET_INTERFACE_VARIABLES = {"gloo": "GLOO_SOCKET_IFNAME", "nccl": "NCCL_SOCKET_IFNAME"}


def socket_interface_variables(
    backend: str, master_addr: str | None, environ: Mapping[str, str]
) -> dict[str, str]:
    """The environment variable to set so that ``backend`` talks through the interface towards
    the rendezvous host (:func:`interface_towards`): ``{}`` when the user set it, the host is
    loopback or unknown, or the backend has none.

    gloo and NCCL otherwise bind to the address their host name resolves to, which on a
    multi-homed host (or a network namespace) may not be the one peers can reach.
    """
    name = SOCKET_INTERFACE_VARIABLES.get(backend)
    if name is None or name in environ or not master_addr:
        return {}
    interface = interface_towards(master_addr)
    return {} if interface is None else {name: interface}


#: ioctl request for an interface's IPv4 address (linux/sockios.h).
_SIOCGIFADDR = 0x8915


# --- rendezvous ----------------------------------------------------------------------------


def rendezvous(
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
