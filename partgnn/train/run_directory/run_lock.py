"""One writer per run directory: a lock file that knows when its holder is gone.

``<run dir>/.lock`` holds the host, process id and start time of the process that writes the
run (global rank 0). It is created exclusively; while held, a daemon thread touches it every
:data:`HEARTBEAT_S` seconds. Another process finding it:

- takes it over when the holder is dead: same host and no such process (a killed run, a torchrun
  restart), or no heartbeat for :data:`STALE_AFTER_S` seconds (a dead host, a host that cannot
  be asked);
- is refused otherwise, with one line naming the holder.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

from partgnn.data.files.output_files import make_folder
from partgnn.errors import InputError

LOCK_FILE = ".lock"
HEARTBEAT_S = 10.0
STALE_AFTER_S = 60.0


class RunLock:
    """The lock of a run directory, held from :meth:`acquire` to :meth:`release`.

    Args:
        run_dir: The run directory (created if missing).
    """

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self.owner = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.time()}
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        #: The outermost folder taking the lock created (removed on release when empty).
        self.created: Path | None = None

    def acquire(self) -> RunLock:
        """Takes the lock (a stale one is taken over).

        Raises:
            InputError: A live process holds it.
        """
        self.created = make_folder(self.path.parent)
        for _ in range(3):  # another taker may race us between the removal and the creation
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                holder = self._holder()
                if holder is not None and not _stale(holder, self.path):
                    raise InputError(
                        f"{self.path.parent}: run directory in use by process {holder['pid']} "
                        f"on {holder['host']} (since {_clock(holder['started'])}); stop it, or "
                        f"remove {self.path} if it is gone"
                    ) from None
                self.path.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w") as handle:
                json.dump(self.owner, handle)
            self._heartbeat = threading.Thread(target=self._beat, daemon=True, name="run-lock")
            self._heartbeat.start()
            return self
        raise InputError(f"{self.path}: could not take the run directory's lock (contended)")

    def release(self) -> None:
        """Stops the heartbeat and removes the lock file if it is still this process's."""
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
            self._heartbeat = None
        if self._holder() == self.owner:
            self.path.unlink(missing_ok=True)
        self._remove_created_if_empty()

    def _remove_created_if_empty(self) -> None:
        """Removes the folders taking the lock created, when nothing was written in them (a run
        refused before its first file): a refused run leaves no empty run directory."""
        if self.created is None:
            return
        for folder in [self.path.parent, *self.path.parent.parents]:
            try:
                folder.rmdir()  # only an empty folder goes
            except OSError:
                return
            if folder == self.created:
                return

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                os.utime(self.path)
            except OSError:
                return  # removed by hand: the next taker will find no lock

    def _holder(self) -> dict | None:
        try:
            holder = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None  # vanished, or torn by a crash while written: nobody holds it
        if not (isinstance(holder, dict) and {"host", "pid", "started"} <= holder.keys()):
            return None
        return holder


def _stale(holder: dict, path: Path) -> bool:
    """True when the holder is known dead, or silent for longer than :data:`STALE_AFTER_S`."""
    if holder["host"] == socket.gethostname():
        try:
            os.kill(int(holder["pid"]), 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False  # alive, another user's
        return False
    try:
        return time.time() - path.stat().st_mtime > STALE_AFTER_S
    except OSError:
        return True


def _clock(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(timestamp)))
