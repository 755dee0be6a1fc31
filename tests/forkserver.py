"""Test ranks started by forking a process that has imported torch, PyG and partgnn once.

A rank process of a distributed test spends about 4 s of CPU importing torch, torch_geometric
(which imports ``torch._dynamo``) and partgnn before it computes anything; the suite starts
hundreds. The fork server imports them once per pytest worker and forks each rank from there
(what ``multiprocessing``'s forkserver and torch's fork-started DataLoader workers do): every
rank is still a process of its own, with its own environment, working directory, stdout and
stderr files and exit status, and meets the others through a real ``torch.distributed``
rendezvous on gloo over loopback. Nothing computes in the server before it forks (no thread
pool, no process group), so a child starts as a fresh interpreter would, but with its modules
already imported.

What a forked rank runs: ``python -m MODULE ARGS`` as :func:`runpy.run_module` does it, in the
environment, directory and files the request names; its exit status is what such a process's
would be (``SystemExit``'s code, 1 and the traceback on stderr for an uncaught exception, minus
the signal number when a signal ended it).

Used by :func:`tests.distributed.launch.launch` (the ranks of a distributed test) and
:func:`run_module` (a ``python -m partgnn`` command of a test); ``PARTGNN_TESTS_FORK=0`` makes
both start fresh interpreters instead. Tests of launchers (torchrun, mpirun, srun), of signals
and of the installed ``partgnn`` script start real ones.

Protocol (one Unix stream connection per process): the client sends one JSON line (``module``,
``args``, ``env``, ``cwd``, ``stdout``, ``stderr``, ``session``); the server answers
``{"pid": N}`` at once and ``{"returncode": C}`` when the child ends. The server ends when its
stdin closes (its pytest worker ended).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

#: What the server imports before it forks: what every rank of the suite imports.
PRELOAD = (
    "torch",
    "torch.distributed",
    "torch_geometric",
    "partgnn.train.trainer",
    "partgnn.train.inference",
    "partgnn.cli.main",
)


def serve(path: str) -> None:
    """The server: imports :data:`PRELOAD`, then forks one child per request on ``path``."""
    for module in PRELOAD:
        importlib.import_module(module)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(128)
    print("ready", flush=True)
    children: dict[int, socket.socket] = {}
    while True:
        readable, _, _ = select.select([listener, sys.stdin], [], [], 0.02)
        if sys.stdin in readable and not sys.stdin.buffer.read1(1):
            break  # the pytest worker is gone
        if listener in readable:
            connection, _ = listener.accept()
            request = json.loads(_read_line(connection))
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                listener.close()
                for other in children.values():
                    other.close()
                _run_child(request, connection)
            connection.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            children[pid] = connection
        _reap(children)
    listener.close()
    for pid in list(children):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    while children:
        _reap(children, block=True)


def _reap(children: dict[int, socket.socket], *, block: bool = False) -> None:
    """Sends the exit status of every child that ended to its client."""
    while children:
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        connection = children.pop(pid, None)
        if connection is not None:
            code = os.waitstatus_to_exitcode(status)
            with contextlib.suppress(OSError):
                connection.sendall(json.dumps({"returncode": code}).encode() + b"\n")
            connection.close()
        if block:
            return


def _read_line(connection: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = connection.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _run_child(request: dict, connection: socket.socket) -> None:
    """In the forked child: becomes ``python -m MODULE ARGS`` and never returns."""
    code = 1
    try:
        connection.close()
        if request.get("session"):
            os.setsid()  # its own process group, killed whole (subprocess's start_new_session)
        for signum in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        stdin = os.open(os.devnull, os.O_RDONLY)
        os.dup2(stdin, 0)
        for fd, name in ((1, "stdout"), (2, "stderr")):
            target = os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(target, fd)
            os.close(target)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115
        sys.argv = [request["module"], *request["args"]]
        try:
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as stop:
            if stop.code is None:
                code = 0
            elif isinstance(stop.code, int):
                code = stop.code
            else:
                print(stop.code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


class ForkedProcess:
    """A rank the server forked, as much of :class:`subprocess.Popen` as the launcher uses."""

    def __init__(self, connection: socket.socket) -> None:
        self._connection = connection
        self._buffer = b""
        self.pid = json.loads(self._line(block=True))["pid"]
        self.returncode: int | None = None

    def _line(self, *, block: bool) -> bytes | None:
        while b"\n" not in self._buffer:
            self._connection.setblocking(block)
            try:
                chunk = self._connection.recv(4096)
            except BlockingIOError:
                return None
            if not chunk:
                raise RuntimeError("the fork server went away")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def poll(self) -> int | None:
        if self.returncode is None:
            line = self._line(block=False)
            if line is not None:
                self.returncode = json.loads(line)["returncode"]
                self._connection.close()
        return self.returncode

    def wait(self) -> int:
        while self.poll() is None:
            time.sleep(0.02)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


class ForkServer:
    """The fork server of this pytest worker (started on first use, ended with the worker).

    Args:
        env: The server's environment (the children's start from the request's).
        cwd: Its working directory (``sys.path[0]`` of a ``python -m`` run).
    """

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="partgnn-forkserver-")
        self.path = os.path.join(self._folder.name, "socket")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.forkserver", self.path],
            env=env,
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self._process.stdout is not None
        if self._process.stdout.readline().strip() != b"ready":
            raise RuntimeError(f"the fork server did not start (exit {self._process.wait()})")

    def start(
        self,
        module: str,
        args: list[str],
        *,
        env: dict[str, str],
        cwd: Path,
        stdout: Path,
        stderr: Path,
        session: bool = False,
    ) -> ForkedProcess:
        """Forks ``python -m module *args`` with this environment, directory and output files
        (appended to); ``session``: in a session (and process group) of its own."""
        request = {"module": module, "args": list(args), "env": env, "cwd": str(cwd),
                   "stdout": str(stdout), "stderr": str(stderr),
                   "session": session}  # fmt: skip
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(self.path)
        connection.sendall(json.dumps(request).encode() + b"\n")
        return ForkedProcess(connection)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            assert self._process.stdin is not None
            self._process.stdin.close()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._folder.cleanup()


_SERVER: ForkServer | None = None


def fork_server() -> ForkServer | None:
    """This pytest worker's fork server, started on first use (``None`` with
    ``PARTGNN_TESTS_FORK=0``)."""
    global _SERVER
    if os.environ.get("PARTGNN_TESTS_FORK", "1") == "0":
        return None
    if _SERVER is None:
        from tests.distributed.launch import REPOSITORY, child_env

        _SERVER = ForkServer(child_env(), REPOSITORY)
        atexit.register(_SERVER.close)
    return _SERVER


def forkable(env: dict[str, str]) -> bool:
    """Whether a child with this environment may be forked: one that computes on the CPU (the
    server imported torch with no GPU visible) with one thread (the server's OpenMP setting)."""
    return env.get("CUDA_VISIBLE_DEVICES") == "" and env.get("OMP_NUM_THREADS") == "1"


def run_module(
    module: str,
    args: list[str],
    *,
    env: dict[str, str],
    cwd: str | os.PathLike[str] | None = None,
    timeout: float | None = None,
    session: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``python -m module *args`` run to its end (forked when :func:`forkable`), its text
    output captured: what :func:`subprocess.run` with ``capture_output=True, text=True`` gives.

    Raises:
        subprocess.TimeoutExpired: It ran past ``timeout`` (it was killed; its group too with
            ``session``).
    """
    command = [sys.executable, "-m", module, *args]
    server = fork_server() if forkable(env) else None
    if server is None:
        return subprocess.run(
            command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
            stdin=subprocess.DEVNULL, start_new_session=session,
        )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="partgnn-forked-") as folder:
        out, err = Path(folder) / "stdout", Path(folder) / "stderr"
        out.touch()
        err.touch()
        process = server.start(
            module, args, env=env, cwd=Path(cwd or os.getcwd()), stdout=out, stderr=err,
            session=session,
        )  # fmt: skip
        deadline = None if timeout is None else time.monotonic() + timeout
        while process.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    if session:
                        os.killpg(process.pid, signal.SIGKILL)
                process.kill()
                process.wait()
                raise subprocess.TimeoutExpired(
                    command, timeout, output=out.read_text(), stderr=err.read_text()
                )
            time.sleep(0.02)
        if session:  # what it started and left behind goes too, as subprocess users do
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        return subprocess.CompletedProcess(
            command, process.returncode, out.read_text(), err.read_text()
        )


if __name__ == "__main__":
    serve(sys.argv[1])
