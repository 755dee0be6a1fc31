"""The ``partgnn`` command: one sub-command per pipeline stage.

Every sub-command registers itself through a ``register(subparsers)`` function of its module.
Those modules import only the standard library, numpy and partgnn's light modules at the top;
torch, PyG, pandas and matplotlib load inside the command that runs, so ``partgnn --help`` and
every ``--help`` answer at once. Bad input (:class:`~partgnn.errors.InputError`) ends the
program with one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence

from partgnn import __version__
from partgnn.cli import (
    config_commands,
    data_commands,
    eval_commands,
    partition_commands,
    report_commands,
    selfcheck_commands,
    train_commands,
)
from partgnn.errors import InputError

EXIT_INPUT_ERROR = 2
EXIT_INTERRUPTED = 130

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
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    data_commands.register(subparsers)
    partition_commands.register(subparsers)
    selfcheck_commands.register(subparsers)
    train_commands.register(subparsers)
    eval_commands.register(subparsers)
    report_commands.register(subparsers)
    config_commands.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs ``partgnn`` with ``argv`` (default: the process arguments); returns the exit code."""
    for message, category in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except InputError as err:
        print(f"partgnn: error: {err}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    except KeyboardInterrupt:
        print("partgnn: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(main())
