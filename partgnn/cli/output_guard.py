"""No command writes over its own inputs: ``--out`` is checked against every input before work.

A command's output is ``args.out``; its inputs are every other argument that names an existing
file or folder (positional files, ``--graphs``, ``--events``, ``--shards``, ``--checkpoint``...).
An output that is the same file as an input (the same path, a symbolic or hard link to it) is
refused, and so is an output *folder* that holds an input, for the commands that replace their
output folder whole (``partition``, ``export-acorn``: ``set_defaults(output_folder=True)``).
Standard library only: it runs before torch loads.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from pathlib import Path

from partgnn.errors import InputError

#: Namespace entries that are never input paths.
_NOT_INPUTS = frozenset({"out", "run", "command", "debug", "output_folder"})


def refuse_output_over_inputs(args: argparse.Namespace) -> None:
    """Raises :class:`InputError` when ``args.out`` is, or (for a folder output) holds, an input.

    Raises:
        InputError: One line naming the output, the argument and the input.
    """
    out = getattr(args, "out", None)
    if out is None:
        return
    out = Path(out)
    writes_folder = bool(getattr(args, "output_folder", False))
    resolved_out = out.resolve()
    for name, path in _input_paths(args):
        if _same_file(out, path):
            raise InputError(
                f"{out}: the output is the input {name!r} ({path}); writing it would destroy "
                "the input: choose another --out"
            )
        if writes_folder and is_within(path.resolve(), resolved_out):
            raise InputError(
                f"{out}: the output folder holds the input {name!r} ({path}), and the folder "
                "is replaced when the output is written: choose another --out"
            )


def _input_paths(args: argparse.Namespace) -> Iterator[tuple[str, Path]]:
    for name, value in vars(args).items():
        if name in _NOT_INPUTS:
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        for item in values:
            if isinstance(item, (str, os.PathLike)) and str(item) and os.path.exists(item):
                yield name, Path(item)


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
