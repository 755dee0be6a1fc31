"""No command writes over its own inputs: ``--out`` is checked against every input before work.

A command's output is ``args.out``; its inputs are every other argument that names an existing
file or folder (positional files, ``--graphs``, ``--events``, ``--shards``, ``--checkpoint``...).
An output that is the same file as an input (the same path, a symbolic or hard link to it) is
refused, and so is an output *folder* that holds an input, for the commands that replace their
output folder whole (``partition``, ``export-acorn``: ``set_defaults(output_folder=True)``).

An output over a file that is already there follows one rule
(:mod:`partgnn.data.files.output_kinds`): a command that writes a kind of file replaces a file of
that kind and says so; anything else needs ``--overwrite`` (:func:`add_overwrite_option`,
:func:`check_replace_output`). Standard library only (and h5py to read a file's kind): it runs
before torch loads.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from partgnn.data.files.output_files import refuse_output_over
from partgnn.data.files.output_kinds import OutputKind, check_replace
from partgnn.errors import InputError

#: Namespace entries that are never input paths.
_NOT_INPUTS = frozenset(
    {"out", "run", "command", "debug", "output_folder", "output_kind", "output_option"}
)


def add_overwrite_option(
    parser: argparse.ArgumentParser, kind: OutputKind, *, option: str = "out"
) -> None:
    """Gives a command that writes ``kind`` at ``--OPTION`` its ``--overwrite`` option; the
    rule is then applied by :func:`check_replace_output` before the command runs."""
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help=f"replace an existing --{option} that is not {kind.name} (one that is, is "
        "replaced without it)",
    )
    parser.set_defaults(output_kind=kind, output_option=option)


def check_replace_output(args: argparse.Namespace) -> None:
    """Applies the replace rule to the command's output, if it writes a kind of file; says on
    stderr what it replaces.

    Raises:
        InputError: Something else is at the output and ``--overwrite`` was not given.
    """
    kind = getattr(args, "output_kind", None)
    path = getattr(args, getattr(args, "output_option", "out"), None)
    if kind is None or path is None:
        return
    line = check_replace(path, kind, command=args.command, overwrite=args.overwrite)
    if line is not None and _first_rank():
        print(line, file=sys.stderr, flush=True)


def _first_rank() -> bool:
    """Whether this process is the job's rank 0 (or runs alone): the one that says things."""
    from partgnn.distributed.launch_env import detect_launcher

    try:
        return detect_launcher().rank == 0
    except InputError:
        return True


def refuse_output_over_inputs(args: argparse.Namespace) -> None:
    """Raises :class:`InputError` when the command's output (``--out``, or the option its
    ``output_option`` names) is, or (for a folder output) holds, an input.

    Raises:
        InputError: One line naming the output, the argument and the input.
    """
    option = getattr(args, "output_option", "out")
    out = getattr(args, option, None)
    if out is None:
        return
    refuse_output_over(
        Path(out), _input_paths(args, option), folder=bool(getattr(args, "output_folder", False)),
        option=option,
    )  # fmt: skip


def _input_paths(args: argparse.Namespace, output: str) -> Iterator[tuple[str, Path]]:
    for name, value in vars(args).items():
        if name in _NOT_INPUTS or name == output:
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        for item in values:
            if isinstance(item, (str, os.PathLike)) and str(item) and os.path.exists(item):
                yield name, Path(item)
