"""Exceptions that the command line turns into one clear line and a non-zero exit.

Exit statuses: 2 bad input (:class:`InputError`, and a destination the user named that cannot
be written: read-only, no permission, below a file), 1 any other failure (a disk that fills
while writing, a bug; a peer's failure takes that rank's status), 128 + N stopped by signal N
(130 Ctrl-C, 143 SIGTERM, 129 SIGHUP). ``--debug`` shows the traceback and keeps the status.
"""

import errno
import signal

EXIT_FAILURE = 1
EXIT_INPUT_ERROR = 2
EXIT_INTERRUPTED = 130


class InputError(Exception):
    """Bad user input: a missing or malformed file, a wrong column, an out-of-range value.

    The message is one line that names the file, event or field and says what is wrong; the CLI
    prints it as ``partgnn: error: <message>`` and exits with status 2.
    """


class OutputError(Exception):
    """An output could not be written for a reason outside partgnn (the disk is full, the file
    system turned read-only). One line naming the file; exit status 1."""


class Stopped(KeyboardInterrupt):
    """The process was asked to stop by a signal (Ctrl-C; SIGTERM from ``timeout``, ``scancel``
    or a job time limit; SIGHUP from a closed terminal); raised in the main thread where the
    signal arrived, so every ``finally`` and cleanup on the way out runs (staging output
    removed). Exit status 128 + the signal's number.

    Args:
        signum: The signal's number.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


#: The signal that asked this process to stop (0: none); set by the command line's handlers.
_stop_requested = 0


def request_stop(signum: int) -> None:
    """Records that signal ``signum`` asked the process to stop (see :func:`raise_if_stopped`)."""
    global _stop_requested
    _stop_requested = signum


def stop_requested() -> int:
    """The signal that asked the process to stop first (0: none)."""
    return _stop_requested


def clear_stop() -> None:
    """Forgets a recorded stop request (a new command starts in this process)."""
    request_stop(0)


def raise_if_stopped() -> None:
    """Raises :class:`Stopped` if a signal asked the process to stop.

    Python swallows an exception that a signal handler raises while a ``__del__`` or weakref
    callback runs ("Exception ignored in ..."); writers call this before they commit an output,
    so a stop request lost that way still stops the command before its output appears.
    """
    if _stop_requested:
        raise Stopped(_stop_requested)


class PeerFailure(RuntimeError):
    """Another rank of the job failed; raised on the ranks that did not.

    The message names the failing ranks and their reasons (``rank 1 failed: <reason>``).

    Args:
        message: The one-line explanation.
        exit_code: The status to exit with: the failing rank's, so that a bad input on one rank
            makes every rank exit 2.
    """

    def __init__(self, message: str, exit_code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class TrainingDiverged(RuntimeError):
    """The loss, a gradient or the weights stopped being finite: training stops on every rank
    before the step that would spread it (the last checkpoint stays finite). One line naming
    the step, the ranks and what was not finite; exit status 1."""


def first_line(err: BaseException) -> str:
    """The first line of an exception's message (library errors can span many lines)."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def exit_status(err: BaseException) -> int:
    """The exit status of a process that ends with ``err``."""
    if isinstance(err, InputError):
        return EXIT_INPUT_ERROR
    if is_path_error(err) and getattr(err, "errno", None) in UNWRITABLE_DESTINATION:
        return EXIT_INPUT_ERROR
    if isinstance(err, PeerFailure):
        return err.exit_code
    if isinstance(err, Stopped):
        return 128 + err.signum
    if isinstance(err, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    return EXIT_FAILURE


#: errno values that mean the file system cannot take an output (not a bad path).
FULL_OR_READ_ONLY = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})

#: errno values of a destination the user named that cannot be written at all (exit status 2,
#: as a bad ``--out`` refused before the work): read-only, no permission, a file in its path.
UNWRITABLE_DESTINATION = frozenset({errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR})

#: errno values of an OSError that name a path the user can act on (a folder turned read-only,
#: a full disk, a missing permission, a file where a folder should be): said as ``PATH: could
#: not be written (REASON)``.
PATH_ERRNOS = FULL_OR_READ_ONLY | UNWRITABLE_DESTINATION


def is_path_error(err: BaseException) -> bool:
    """Whether ``err`` is an OSError of :data:`PATH_ERRNOS` that names its path."""
    return isinstance(err, OSError) and err.errno in PATH_ERRNOS and bool(err.filename)


def describe(err: BaseException) -> str:
    """One line saying what went wrong: partgnn's own messages as they are, a file system's
    refusal with its path, other exceptions with their type (``ValueError: ...``)."""
    if isinstance(err, (InputError, OutputError, PeerFailure, TrainingDiverged)):
        return first_line(err)
    if is_path_error(err):
        assert isinstance(err, OSError)
        return f"{err.filename}: could not be written ({err.strerror})"
    if isinstance(err, Stopped) and err.signum != signal.SIGINT:
        return f"stopped by {signal.Signals(err.signum).name}"
    if isinstance(err, KeyboardInterrupt):
        return "interrupted"
    return f"{type(err).__name__}: {first_line(err)}"
