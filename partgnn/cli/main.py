"""The ``partgnn`` command: one sub-command per pipeline stage.

Every sub-command registers itself through a ``register(subparsers)`` function of its module.
Those modules import only the standard library, numpy and partgnn's light modules at the top;
torch, PyG, pandas and matplotlib load inside the command that runs, so ``partgnn --help`` and
every ``--help`` answer at once.

Every failure ends the program with one line on stderr, never a traceback: bad input
(:class:`~partgnn.errors.InputError`) with exit status 2, another rank's failure
(:class:`~partgnn.errors.PeerFailure`) with that rank's status, anything else with 1 (the line
names the exception), a stop by signal N (Ctrl-C, SIGTERM, SIGHUP) with 128 + N after the
command's cleanup (:mod:`partgnn.cli.process_exit`). ``--debug`` or ``PARTGNN_DEBUG=1`` lets
exceptions through with their full tracebacks, for developers.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
import warnings
from collections.abc import Sequence

from partgnn.cli import (
    acorn_commands,
    config_commands,
    data_commands,
    eval_commands,
    export_commands,
    partition_commands,
    plan_commands,
    pretrained_commands,
    report_commands,
    selfcheck_commands,
    train_commands,
)
from partgnn.cli.output_guard import check_replace_output, refuse_output_over_inputs
from partgnn.cli.process_exit import report_to_launcher, stop_on_signals
from partgnn.errors import (
    InputError,
    OutputError,
    PeerFailure,
    TrainingDiverged,
    describe,
    exit_status,
    is_path_error,
)
from partgnn.version import __version__

#: Set to 1 to see full tracebacks (same as ``--debug``).
DEBUG_ENV = "PARTGNN_DEBUG"

#: Third-party warnings a partgnn user can do nothing about, silenced on the command line:
#: (message regex, category). torch >= 2.10 deprecates ``torch.jit.script``, which
#: torch_geometric calls while it imports.
QUIET_WARNINGS: tuple[tuple[str, type[Warning]], ...] = (
    (r"`torch\.jit\.script` is deprecated", DeprecationWarning),
    (r"`torch\.jit\.script` is deprecated", FutureWarning),
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``partgnn`` with all its sub-commands."""
    parser = argparse.ArgumentParser(
        prog="partgnn",
        description="Graph-parallel GNN training on particle-physics event graphs.",
    )
    parser.add_argument("--version", action="version", version=f"partgnn {__version__}")
    parser.add_argument(
        "--debug",
        action="store_true",
        help=f"show full tracebacks instead of one-line errors (same as {DEBUG_ENV}=1)",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    data_commands.register(subparsers)
    acorn_commands.register(subparsers)
    partition_commands.register(subparsers)
    selfcheck_commands.register(subparsers)
    train_commands.register(subparsers)
    plan_commands.register(subparsers)
    eval_commands.register(subparsers)
    report_commands.register(subparsers)
    config_commands.register(subparsers)
    pretrained_commands.register(subparsers)
    export_commands.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs ``partgnn`` with ``argv`` (default: the process arguments); returns the exit code."""
    for message, category in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    parser = build_parser()
    args = parser.parse_args(_with_negative_lists(sys.argv[1:] if argv is None else argv))
    debug = args.debug or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    try:
        with stop_on_signals():
            refuse_output_over_inputs(args)
            check_replace_output(args)
            return int(args.run(args) or 0)
    except (Exception, KeyboardInterrupt) as err:
        if debug:  # the whole traceback, and the same exit status as without --debug
            traceback.print_exc()
            return exit_status(err)
        known = (InputError, OutputError, PeerFailure, TrainingDiverged, KeyboardInterrupt)
        hint = (
            "" if isinstance(err, known) or is_path_error(err)
            else f" ({DEBUG_ENV}=1 shows the traceback)"
        )  # fmt: skip
        _close_progress_bars()
        line = f"partgnn: error: {describe(err)}{hint}"
        # One write (print writes the newline apart when stderr is unbuffered): a rank stopped
        # by its launcher right after it cannot leave the line without its end, which the
        # launcher's next line would then run on from.
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
        report_to_launcher(line)
        return exit_status(err)


#: Options whose value is a comma-separated list of numbers, which may start with a minus sign.
NUMBER_LIST_OPTIONS = frozenset({"--feature-scales"})


def _with_negative_lists(argv: Sequence[str]) -> list[str]:
    """``argv`` with ``--feature-scales -1,2`` written ``--feature-scales=-1,2``: argparse takes
    a value starting with ``-`` (not a lone negative number) for an option, and would say the
    option lacks its value instead of what is wrong with it."""
    joined: list[str] = []
    for item in argv:
        if (
            joined
            and joined[-1] in NUMBER_LIST_OPTIONS
            and item[:1] == "-"
            and item[1:2] in (*"0123456789", ".")
        ):
            joined[-1] = f"{joined[-1]}={item}"
        else:
            joined.append(item)
    return joined


def _close_progress_bars() -> None:
    """Ends the progress bars a failure left open, so the error starts on a line of its own."""
    tqdm_module = sys.modules.get("tqdm")
    if tqdm_module is None:
        return
    for bar in list(getattr(tqdm_module.tqdm, "_instances", ())):
        bar.close()


if __name__ == "__main__":
    raise SystemExit(main())
