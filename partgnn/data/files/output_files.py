"""Writing output files safely: atomically, flushed to disk, and never into a full disk.

:func:`atomic_output` (a file) and :func:`atomic_directory` (a folder of files) write under a
temporary name beside the target and rename it into place only when complete and flushed
(fsync), so a crash or a kill never leaves a half-written output under the final name. A
temporary name says which process writes it (``.<name>.<host>.<pid>.<random>``): the next
writer of the same output removes those whose process is gone (killed with SIGKILL, or a
crashed node), never a live writer's.
:func:`check_output_path` fails on a bad ``--out`` before any work.
:class:`SpaceGuard` stops an HDF5 writer before the disk fills: HDF5 reports failed writes only
while it evicts its caches, as a stream of ignored errors and sometimes a crash.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from partgnn.errors import (
    FULL_OR_READ_ONLY,
    InputError,
    OutputError,
    first_line,
    raise_if_stopped,
)

#: Suffix of the temporary files :func:`atomic_output` writes (``.<name>.<random>.tmp``).
TEMPORARY_SUFFIX = ".tmp"


def check_output_path(path: str | os.PathLike[str]) -> Path:
    """Checks, before any work, that a file can be written at ``path``.

    Creates the missing parent folders and writes and removes a temporary file beside it.

    Raises:
        InputError: ``path`` is a folder, or its folder cannot be created or written to.
    """
    _temporary_beside(Path(path)).unlink()
    return Path(path)


@contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yields a temporary path beside ``path``; renames it to ``path`` only on success.

    The temporary file is flushed to disk (fsync) before the rename, and the folder after it,
    so after a crash ``path`` is either the old file or the whole new one. On an exception (or
    Ctrl-C) the temporary file is removed and ``path`` is left untouched.

    Raises:
        InputError: ``path`` is a folder or cannot be written (checked before the body runs).
        OutputError: The disk filled up (or turned read-only) while the body wrote.
    """
    path = Path(path)
    tmp = _temporary_beside(path)
    try:
        yield tmp
        raise_if_stopped()
        fsync_path(tmp)
        os.replace(tmp, path)
        fsync_path(path.parent)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        _raise_full_disk(path, err)
        raise


@contextmanager
def atomic_directory(
    path: str | os.PathLike[str], own: Callable[[Path], bool], *, what: str, option: str = "--out"
) -> Iterator[Path]:
    """Yields an empty staging folder beside ``path``; it becomes ``path`` only on success.

    On success the staging folder's files and the folder itself are flushed to disk, then it
    replaces ``path`` (an existing folder there is swapped out and removed). On an exception
    the staging folder is removed and ``path`` is left untouched. An existing ``path`` is only
    replaced when every file in it is one this kind of output writes (a previous output):
    anything else there (a user's plot, a project's sources) refuses the output before the
    body runs, so nothing a user made is deleted.

    Args:
        path: The output folder.
        own: Whether a file (its path relative to ``path``) is one this output writes.
        what: What writes the folder, for the refusal (e.g. ``partition``).
        option: The option that names the folder, for the refusal.

    Raises:
        InputError: ``path``'s folder cannot be created or written to, ``path`` is a file, or
            it holds files this output does not write (before the body runs).
        OutputError: The disk filled up (or turned read-only) while the body wrote.
    """
    path = Path(path)
    refuse_foreign_entries(path, own, what=what, option=option)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_dead_writers_staging(path)
        staging = Path(tempfile.mkdtemp(prefix=_staging_prefix(path), dir=path.parent))
    except OSError as err:
        raise _cannot_write_here(path, err) from None
    try:
        yield staging
        raise_if_stopped()
        staging.chmod(0o777 & ~current_umask())
        for written in [*staging.iterdir(), staging]:
            fsync_path(written)
        _replace_directory(staging, path)
        fsync_path(path.parent)
    except BaseException as err:
        shutil.rmtree(staging, ignore_errors=True)
        _raise_full_disk(path, err)
        raise


def refuse_foreign_entries(
    path: Path, own: Callable[[Path], bool], *, what: str, option: str = "--out"
) -> None:
    """Raises InputError when ``path`` is a file, or a folder holding anything but files that
    ``own`` accepts (by their paths relative to ``path``) and the folders that hold them."""
    if not path.exists() and not path.is_symlink():
        return
    if not path.is_dir() or path.is_symlink():
        raise InputError(f"{path}: exists and is not a folder; {what} writes a folder there")
    foreign = []
    for entry in path.rglob("*"):
        relative = entry.relative_to(path)
        if entry.is_dir() and not entry.is_symlink():
            accepted = any(entry.iterdir())  # a folder is kept by what it holds
        else:
            accepted = entry.is_file() and not entry.is_symlink() and own(relative)
        if not accepted:
            nested = len(relative.parts) > 1 or entry.is_dir()
            foreign.append(relative.parts[0] + ("/" if nested else ""))
    if foreign:
        names = sorted(set(foreign))
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        raise InputError(
            f"{path}: holds what {what} did not write ({shown}), which replacing the folder "
            f"would delete: move it out, or choose another {option}"
        )


def make_folder(path: str | os.PathLike[str]) -> Path | None:
    """Creates the folder ``path`` and its missing parents.

    Returns:
        The outermost folder it created (``None``: ``path`` existed): what to remove, when
        empty, to leave nothing behind.

    Raises:
        InputError: It cannot be created here (under /proc, below a file, no permission,
            read-only): one line naming it.
    """
    path = Path(path)
    missing = [folder for folder in [path, *path.parents] if not folder.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise _cannot_write_here(path, err) from None
    return missing[-1] if missing else None


def _replace_directory(staging: Path, path: Path) -> None:
    if path.exists():
        old = Path(tempfile.mkdtemp(prefix=f"{_staging_prefix(path)}old.", dir=path.parent))
        old.rmdir()
        path.rename(old)
        staging.rename(path)
        shutil.rmtree(old, ignore_errors=True)
    else:
        staging.rename(path)


def _raise_full_disk(path: Path, err: BaseException) -> None:
    """Raises OutputError naming ``path`` when ``err`` says its file system is full or read-only."""
    if isinstance(err, OSError) and err.errno in FULL_OR_READ_ONLY:
        raise OutputError(f"{path}: could not be written ({err.strerror})") from None


def _cannot_write_here(path: Path, err: OSError) -> InputError:
    below_file = next((p for p in path.parents if p.is_file() or (p.is_symlink() and not
                       p.is_dir())), None)  # fmt: skip
    if below_file is not None:
        return InputError(f"{path}: cannot write here ({below_file} is a file, not a folder)")
    return InputError(f"{path}: cannot write here ({err.strerror or first_line(err)})")


def remove_stale_temporaries(*folders: str | os.PathLike[str]) -> list[Path]:
    """Removes the temporary files of :func:`atomic_output` that a process killed while writing
    left in ``folders``; returns them. Only call it when no other process writes there (holding
    the run directory's lock).
    """
    stale = [
        path
        for folder in map(Path, folders)
        if folder.is_dir()
        for path in folder.glob(f".*{TEMPORARY_SUFFIX}")
        if path.is_file()
    ]
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


def _host() -> str:
    """This machine's short host name, as it appears in staging names (no dots)."""
    return socket.gethostname().split(".")[0] or "host"


def _staging_prefix(path: Path) -> str:
    """``.<name>.<host>.<pid>.``: the start of the staging names this process writes for
    ``path``."""
    return f".{path.name}.{_host()}.{os.getpid()}."


def remove_dead_writers_staging(path: str | os.PathLike[str]) -> list[Path]:
    """Removes the staging files and folders that writers of ``path`` on this host left when they
    died (their process no longer exists); returns them.

    A staging name written by another host, or by a process still running, is left alone.
    """
    path = Path(path)
    removed = []
    prefix = f".{path.name}."
    for candidate in path.parent.glob(f"{glob.escape(prefix)}*"):
        host, _, rest = candidate.name[len(prefix) :].partition(".")
        pid, _, _ = rest.partition(".")
        if host != _host() or not pid.isdigit() or _process_exists(int(pid)):
            continue
        if candidate.is_dir() and not candidate.is_symlink():
            shutil.rmtree(candidate, ignore_errors=True)
        else:
            candidate.unlink(missing_ok=True)
        removed.append(candidate)
    return removed


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def fsync_path(path: str | os.PathLike[str]) -> None:
    """Flushes a file's data (or a folder's entries) to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temporary_beside(path: Path) -> Path:
    """A new empty file ``.<name>.<random>.tmp`` in ``path``'s folder (created if missing)."""
    if path.is_dir():
        raise InputError(f"{path}: is a folder; give the path of the file to write")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_dead_writers_staging(path)
        fd, tmp_name = tempfile.mkstemp(
            prefix=_staging_prefix(path), suffix=TEMPORARY_SUFFIX, dir=path.parent
        )
    except OSError as err:
        raise _cannot_write_here(path, err) from None
    os.close(fd)
    tmp = Path(tmp_name)
    # mkstemp creates the file private (0600); give the result the permissions of a normal file.
    tmp.chmod(0o666 & ~current_umask())
    return tmp


def current_umask() -> int:
    """The process's file-creation mask (read without changing it for longer than a moment)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: Free space a writer always leaves on the disk [bytes].
RESERVE_BYTES = 1 << 20


class SpaceGuard:
    """Stops a writer of per-event output before the disk fills up.

    Call :meth:`check` before each event with its size, and :meth:`written` after it is
    flushed: ``check`` fails unless the disk has room for that event (plus 10 %), for one more
    event as large as the largest written so far, and :data:`RESERVE_BYTES`.

    Args:
        output: What is being written (the file or folder named in the error).
        files: The files that grow.
    """

    def __init__(self, output: str | os.PathLike[str], files: Iterable[str | os.PathLike[str]]):
        self.output = Path(output)
        self.files = [Path(f) for f in files]
        self.size = self._size()
        self.largest_event = 0

    def check(self, next_bytes: int) -> None:
        """Raises OutputError if an event of about ``next_bytes`` might not fit on the disk."""
        free = shutil.disk_usage(self.files[0].parent).free
        needed = int(1.1 * next_bytes) + self.largest_event + RESERVE_BYTES
        if free < needed:
            raise OutputError(
                f"{self.output}: stopped before the disk is full ({free / 2**20:.2f} MiB free, "
                f"{needed / 2**20:.2f} MiB needed to write the next event safely); free space "
                "and re-run"
            )

    def written(self) -> None:
        """Records the growth of the files since the last call (one event, flushed)."""
        size = self._size()
        self.largest_event = max(self.largest_event, size - self.size)
        self.size = size

    def _size(self) -> int:
        return sum(f.stat().st_size for f in self.files if f.exists())


def refuse_output_over(
    out: Path, inputs: Iterator[tuple[str, Path]], *, folder: bool, option: str = "out"
) -> None:
    """Raises :class:`InputError` when ``out`` is one of ``inputs`` (name, path), or, for a
    ``folder`` output (replaced whole), holds one.

    Raises:
        InputError: One line naming the output, the argument and the input.
    """
    resolved_out = out.resolve()
    for name, path in inputs:
        if _same_file(out, path):
            raise InputError(
                f"{out}: the output is the input {name!r} ({path}); writing it would destroy "
                f"the input: choose another --{option}"
            )
        if folder and is_within(path.resolve(), resolved_out):
            raise InputError(
                f"{out}: the output folder holds the input {name!r} ({path}), and the folder "
                f"is replaced when the output is written: choose another --{option}"
            )


def _same_file(out: Path, path: Path) -> bool:
    if not out.exists():
        return out.resolve() == path.resolve()
    try:
        return os.path.samefile(out, path)
    except OSError:
        return False


def is_within(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or lies under it (both resolved)."""
    return path == folder or folder in path.parents
