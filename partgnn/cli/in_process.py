"""One ``partgnn`` sub-command run inside this process by another (``pretrained --make-map``
fits a map, ``pretrained --evaluate`` builds graphs and scores them)."""

from __future__ import annotations

import argparse

from partgnn.errors import InputError


def run_in_process(argv: list[str]) -> None:
    """``partgnn ARGV`` for a data or evaluation command (``fit-module-map``, ``build-graphs``,
    ``infer``, ...), in this process.

    Raises:
        InputError: The command returned a non-zero exit code (its own error is raised as is).
    """
    from partgnn.cli import data_commands, eval_commands

    parser = argparse.ArgumentParser(prog="partgnn")
    subparsers = parser.add_subparsers()
    data_commands.register(subparsers)
    eval_commands.register(subparsers)
    command = parser.parse_args(argv)
    if code := command.run(command):
        raise InputError(f"partgnn {' '.join(argv)}: exit {code}")
