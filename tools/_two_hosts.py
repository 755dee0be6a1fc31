"""Two test hosts on one machine: network namespaces joined by a veth pair (the tests' and
``tools/bench_hosts.py``'s).

Each namespace has its own network stack (its loopback, one veth end with its own address), so
processes in the two talk over a real link and nothing else, as two hosts do. The link can be
rate limited with ``tc`` (token bucket ``tbf``; this kernel has no ``netem``, so no added delay).
Needs root and ``ip``/``tc`` (iproute2); :func:`unavailable_reason` says why not otherwise.
Everything made is removed on exit (deleting a namespace deletes its veth end and the pair).

    with two_hosts(rate="1gbit") as hosts:
        process = hosts.popen(0, ["python", "-c", "..."], env=...)
        job = subprocess.run(hosts.mpiexec(["python", "-c", "..."]), env=hosts.mpi_env(env))
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

#: hydra's "rsh" for the test hosts: runs a command in the namespace of the host it names.
NETNS_RSH = Path(__file__).with_name("netns_rsh")

#: tbf parameters: the bucket holds this many seconds of traffic at the rate (at least 64 KiB),
#: packets wait at most this long.
BURST_SECONDS = 0.004
LATENCY = "100ms"


@dataclass(frozen=True)
class TwoHosts:
    """The two hosts: namespace, interface and address of each."""

    namespaces: tuple[str, str]
    interfaces: tuple[str, str]
    addresses: tuple[str, str]
    rate: str | None

    def command(self, host: int, argv: list[str]) -> list[str]:
        """``argv`` run on ``host`` (0 or 1)."""
        return ["ip", "netns", "exec", self.namespaces[host], *argv]

    def torchrun(
        self, host: int, module_args: list[str], *, nproc: int = 1, port: int = 29500
    ) -> list[str]:
        """The torchrun command of ``host`` for a 2-node job (``-m`` and ``module_args``),
        rendezvous on host 0's address."""
        torchrun = Path(sys.executable).parent / "torchrun"
        return [
            str(torchrun),
            "--nnodes=2",
            f"--nproc-per-node={nproc}",
            f"--node-rank={host}",
            f"--master-addr={self.addresses[0]}",
            f"--master-port={port}",
            "-m",
            *module_args,
        ]

    def mpiexec(self, argv: list[str], *, nproc: int = 1) -> list[str]:
        """The ``mpiexec`` (MPICH hydra) command, run on host 0, that starts ``argv`` on both
        hosts, ``nproc`` processes each: hydra reaches host 1 through :data:`NETNS_RSH` (give
        the processes :meth:`mpi_env`). ``MASTER_ADDR`` is host 0's address: both namespaces
        share this machine's host name, which is all MPI and partgnn's rendezvous would
        otherwise have to find host 0 by."""
        mpiexec = Path(sys.executable).parent / "mpiexec"
        hosts = ",".join(self.addresses)
        return self.command(
            0,
            [str(mpiexec), "-hosts", hosts, "-n", str(2 * nproc), "-ppn", str(nproc),
             "-launcher", "rsh", "-launcher-exec", str(NETNS_RSH), "-iface",
             self.interfaces[0], "-genv", "MASTER_ADDR", self.addresses[0], *argv],
        )  # fmt: skip

    def mpi_env(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` with what :data:`NETNS_RSH` needs (the address -> namespace map)."""
        hosts = " ".join(f"{a}={n}" for a, n in zip(self.addresses, self.namespaces, strict=True))
        path = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
        return {**env, "PARTGNN_NETNS_HOSTS": hosts, "PATH": path}

    def popen(
        self,
        host: int,
        argv: list[str],
        *,
        env: dict[str, str],
        stdout: IO | int | None = None,
        stderr: IO | int | None = None,
        cwd: Path | None = None,
    ) -> subprocess.Popen:
        """Starts ``argv`` on ``host`` (partgnn finds the interface gloo should use by itself:
        ``GLOO_SOCKET_IFNAME`` is not set here)."""
        return subprocess.Popen(
            self.command(host, argv), env=env, stdout=stdout, stderr=stderr, cwd=cwd
        )


def unavailable_reason() -> str | None:
    """Why two hosts cannot be made here (``None``: they can)."""
    if os.name != "posix" or os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"no `{tool}` (iproute2) on PATH"
    name = f"pgnprobe{os.getpid()}"
    made = _run(["ip", "netns", "add", name])
    if made.returncode:
        return f"`ip netns add` failed: {made.stderr.strip() or made.returncode}"
    _run(["ip", "netns", "del", name])
    return None


@contextmanager
def two_hosts(rate: str | None = None) -> Iterator[TwoHosts]:
    """Makes the two hosts, yields them, removes them.

    Args:
        rate: Limit each direction of the link to this rate (``tc`` syntax: ``"1gbit"``,
            ``"10gbit"``); ``None``: the veth pair's own speed.

    Raises:
        RuntimeError: A step failed (its command and message).
    """
    tag = f"{os.getpid() % 100000}"
    namespaces = (f"pgn{tag}a", f"pgn{tag}b")
    interfaces = (f"pgv{tag}a", f"pgv{tag}b")
    subnet = f"10.{200 + os.getpid() % 50}.{os.getpid() // 50 % 250}"
    addresses = (f"{subnet}.1", f"{subnet}.2")
    try:
        for namespace in namespaces:
            _check(["ip", "netns", "add", namespace])
        _check(["ip", "link", "add", interfaces[0], "type", "veth", "peer", "name", interfaces[1]])
        for namespace, interface, address in zip(namespaces, interfaces, addresses, strict=True):
            _check(["ip", "link", "set", interface, "netns", namespace])
            _check(["ip", "-n", namespace, "addr", "add", f"{address}/24", "dev", interface])
            _check(["ip", "-n", namespace, "link", "set", interface, "up"])
            _check(["ip", "-n", namespace, "link", "set", "lo", "up"])
            if rate is not None:
                burst = max(65536, int(_bits_per_second(rate) / 8 * BURST_SECONDS))
                tbf = ["tbf", "rate", rate, "burst", str(burst), "latency", LATENCY]
                _check(["ip", "netns", "exec", namespace, "tc", "qdisc", "add", "dev", interface,
                        "root", *tbf])  # fmt: skip
        yield TwoHosts(namespaces, interfaces, addresses, rate)
    finally:
        for namespace in namespaces:
            _run(["ip", "netns", "del", namespace])
        _run(["ip", "link", "del", interfaces[0]])  # if it never moved into a namespace


def _bits_per_second(rate: str) -> float:
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bit": 1.0}
    for unit, factor in units.items():
        if rate.lower().endswith(unit):
            return float(rate[: -len(unit)]) * factor
    raise ValueError(f"rate {rate!r}: use a number with kbit, mbit or gbit")


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def _check(argv: list[str]) -> None:
    done = _run(argv)
    if done.returncode:
        raise RuntimeError(f"`{' '.join(argv)}` failed: {done.stderr.strip()}")
