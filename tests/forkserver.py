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

Used by :func:`tests.distributed.launch.launch` (the ranks of a distributed test),
:func:`run_module` (a ``python -m partgnn`` command of a test) and :func:`forked_python` (the
``python`` a test runs a tool with: a folder of commands, :func:`command_main`, in which
``python tools/NAME.py``, ``partgnn``, ``torchrun`` and torchrun's ranks are forked, each with
the stdin, stdout and stderr of the command that asked, its signals passed on and its exit status
returned); ``PARTGNN_TESTS_FORK=0`` makes all of them start fresh interpreters instead. Tests of
launchers (torchrun, mpirun, srun run as a user does), of signals, of the soak and of the
installed ``partgnn`` script start real ones.

Protocol (one Unix stream connection per process): the client sends one JSON line (``module``
or ``script``, ``args``, ``env``, ``cwd``, ``stdout`` and ``stderr`` files or, from a command,
its three standard file descriptors with the line, ``session``, ``executable``, ``unbuffered``);
the server answers ``{"pid": N}`` at once and ``{"returncode": C}`` when the child ends. A
command's connection closing first (the command was killed) kills its child. The server ends
when its stdin closes (its pytest worker ended).
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
from collections.abc import Mapping
from pathlib import Path

#: The repository (its tools' and examples' folders; ``sys.path`` of a command).
_REPOSITORY = Path(__file__).resolve().parent.parent
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
    tied: dict[socket.socket, int] = {}  # a command's connection -> its child
    while True:
        readable, _, _ = select.select([listener, sys.stdin, *tied], [], [], 0.02)
        if sys.stdin in readable and not sys.stdin.buffer.read1(1):
            break  # the pytest worker is gone
        for connection in set(readable) & set(tied):
            # A command (:func:`command_main`) sends nothing after its request: this is its end.
            # Killed before its child ended, it takes the child with it.
            with contextlib.suppress(ProcessLookupError):
                os.kill(tied.pop(connection), signal.SIGKILL)
        if listener in readable:
            connection, _ = listener.accept()
            request, fds = _receive_request(connection)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                listener.close()
                for other in children.values():
                    other.close()
                _run_child(request, connection, fds)
            for fd in fds:
                os.close(fd)
            connection.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            children[pid] = connection
            if fds:
                tied[connection] = pid
        _reap(children, tied)
    listener.close()
    for pid in list(children):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    while children:
        _reap(children, tied, block=True)


def _reap(
    children: dict[int, socket.socket], tied: dict[socket.socket, int], *, block: bool = False
) -> None:
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
            tied.pop(connection, None)
            code = os.waitstatus_to_exitcode(status)
            with contextlib.suppress(OSError):
                connection.sendall(json.dumps({"returncode": code}).encode() + b"\n")
            connection.close()
        if block:
            return


def _python_path(env: Mapping[str, str]) -> list[str]:
    """The ``sys.path`` entries an interpreter takes from ``PYTHONPATH`` in ``env``."""
    return [
        os.path.abspath(entry) for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry
    ]


#: The server's own PYTHONPATH entries (not a child's).
_SERVER_PYTHONPATH = _python_path(os.environ)


def _receive_request(connection: socket.socket) -> tuple[dict, list[int]]:
    """One request (a JSON line) and the file descriptors sent with it (a command's stdin,
    stdout and stderr; none from :meth:`ForkServer.start`)."""
    data, fds, _, _ = socket.recv_fds(connection, 65536, 3)
    while not data.endswith(b"\n"):
        chunk = connection.recv(65536)
        if not chunk:
            break
        data += chunk
    return json.loads(data), list(fds)


def _run_child(request: dict, connection: socket.socket, fds: list[int]) -> None:
    """In the forked child: becomes ``python -m MODULE ARGS`` (or ``python SCRIPT ARGS``) and
    never returns."""
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
        if fds:  # a command's own stdin, stdout and stderr
            for fd, received in enumerate(fds):
                os.dup2(received, fd)
                os.close(received)
        else:
            stdin = os.open(os.devnull, os.O_RDONLY)
            os.dup2(stdin, 0)
            for fd, name in ((1, "stdout"), (2, "stderr")):
                target = os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                os.dup2(target, fd)
                os.close(target)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115
        if request.get("unbuffered"):  # python -u
            sys.stdout.reconfigure(write_through=True)
            sys.stderr.reconfigure(write_through=True)
        if request.get("executable"):  # what its own commands start (:func:`command_main`)
            sys.executable = request["executable"]
        # sys.path as the child's interpreter would start with it: its script's folder or its
        # directory first, then its PYTHONPATH, then the rest (the server's PYTHONPATH left out).
        first = (
            os.path.dirname(os.path.abspath(request["script"]))
            if "script" in request
            else os.getcwd()
        )
        rest = [entry for entry in sys.path[1:] if entry not in _SERVER_PYTHONPATH]
        sys.path[:] = [first, *_python_path(request["env"]), *rest]
        try:
            if "script" in request:
                sys.argv = [request["script"], *request["args"]]
                runpy.run_path(request["script"], run_name="__main__")
            else:
                sys.argv = [request["module"], *request["args"]]
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


#: The commands a test's command line may name that become a forked child: partgnn's own
#: (``partgnn``, ``python -m partgnn``) and torchrun (``python -m torch.distributed.run``), whose
#: ranks are such commands too.
FORKED_MODULES = {"partgnn": "partgnn", "torchrun": "torch.distributed.run"}
#: The repository's folders of scripts a test runs (``python tools/NAME.py``, the examples'
#: Python scripts): forked, but for the ones that must start bare (score_exported shows that a
#: file scores without partgnn).
SCRIPT_FOLDERS = (
    _REPOSITORY / "tools",
    _REPOSITORY / "tools" / "studies",
    _REPOSITORY / "examples",
)
FRESH_SCRIPTS = {"score_exported.py"}
#: Variables of a rank started by an MPI launcher: its MPI library reaches the launcher through
#: what the process inherited (PMI_FD), which a forked child does not have.
MPI_VARIABLES = ("PMI_", "PMIX_", "OMPI_", "MPI_LOCALRANKID", "HYDRA_")
#: The names :meth:`ForkServer._write_commands` writes (``python3`` is ``python``).
COMMANDS = ("python", "python3", "partgnn", "torchrun")


def command_main(
    name: str, argv: list[str], *, socket_path: str, real_bin: str, bin_dir: str, netns: int
) -> None:
    """A command of :attr:`ForkServer.bin` (``python``, ``partgnn``, ``torchrun``): has the
    server fork what it names, with this process's environment, directory, stdin, stdout and
    stderr, passes on the signals it gets, and exits as the child did. What it does not name
    (``python -c``, other modules and scripts), a child that would not be :func:`forkable`, a
    rank of an MPI launcher or one in another network namespace (a test host) runs the installed
    command instead.
    Never returns."""
    request = _command_request(name, argv)
    inode = os.stat("/proc/self/ns/net").st_ino
    under_mpi = any(variable.startswith(MPI_VARIABLES) for variable in os.environ)
    if request is None or not forkable(dict(os.environ)) or inode != netns or under_mpi:
        real = os.path.join(real_bin, "python" if name == "python3" else name)
        os.execv(real, [real, *argv])
    request.update(env=dict(os.environ), cwd=os.getcwd(),
                   executable=os.path.join(bin_dir, "python"))  # fmt: skip
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(socket_path)
    standard = [fd if _is_open(fd) else os.open(os.devnull, os.O_RDWR) for fd in (0, 1, 2)]
    socket.send_fds(connection, [json.dumps(request).encode() + b"\n"], standard)
    answers = connection.makefile("rb")
    pid = json.loads(answers.readline())["pid"]

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
                   signal.SIGUSR1, signal.SIGUSR2):  # fmt: skip
        signal.signal(signum, forward)
    line = answers.readline()
    code = json.loads(line)["returncode"] if line else 1
    if code < 0:  # ended by a signal: so does this process
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


def _command_request(name: str, argv: list[str]) -> dict | None:
    """What the server forks for ``name argv``; ``None``: nothing (the installed command runs)."""
    if name in FORKED_MODULES:
        return {"module": FORKED_MODULES[name], "args": argv}
    options, unbuffered = list(argv), False
    while options[:1] == ["-u"]:
        options, unbuffered = options[1:], True
    if len(options) >= 2 and options[0] == "-m" and options[1] in FORKED_MODULES.values():
        return {"module": options[1], "args": options[2:], "unbuffered": unbuffered}
    if options and options[0].endswith(".py"):
        script = Path(options[0]).resolve()
        if script.parent in SCRIPT_FOLDERS and script.name not in FRESH_SCRIPTS:
            return {"script": str(script), "args": options[1:], "unbuffered": unbuffered}
    return None


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


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
        self.bin = self._write_commands(Path(self._folder.name) / "bin")

    def _write_commands(self, bin_dir: Path) -> Path:
        """A folder like the environment's ``bin`` (every entry linked) whose ``python``,
        ``partgnn`` and ``torchrun`` are :func:`command_main`: a process whose ``sys.executable``
        is its ``python`` (a tool run from there) starts its partgnn commands, torchrun and
        torchrun's ranks forked from this server."""
        real_bin = Path(sys.executable).parent
        bin_dir.mkdir()
        for entry in real_bin.iterdir():
            if entry.name not in COMMANDS:
                (bin_dir / entry.name).symlink_to(entry)
        netns = os.stat("/proc/self/ns/net").st_ino
        for name in COMMANDS:
            command = bin_dir / name
            command.write_text(
                f"#!{sys.executable} -S\n"
                "import sys\n"
                f"sys.path.insert(0, {str(_REPOSITORY)!r})\n"
                "from tests.forkserver import command_main\n"
                f"command_main({name!r}, sys.argv[1:], socket_path={self.path!r}, "
                f"real_bin={str(real_bin)!r}, bin_dir={str(bin_dir)!r}, netns={netns})\n"
            )
            command.chmod(0o755)
        return bin_dir

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

    @property
    def pid(self) -> int:
        """The server's process id (its children are the processes it forked)."""
        return self._process.pid

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


def forked_bin() -> Path:
    """The folder of commands a test runs (``python``, ``partgnn``, ``torchrun``, the rest of
    the environment's ``bin``): the fork server's :attr:`ForkServer.bin`, or the environment's
    own ``bin`` with ``PARTGNN_TESTS_FORK=0``."""
    server = fork_server()
    return Path(sys.executable).parent if server is None else server.bin


def forked_python() -> str:
    """The ``python`` a test runs a tool with: the fork server's :func:`command_main` (the tool
    and the commands it starts forked), or this interpreter with ``PARTGNN_TESTS_FORK=0``."""
    server = fork_server()
    return sys.executable if server is None else str(server.bin / "python")


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
