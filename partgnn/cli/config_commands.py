"""``partgnn configs``: list the shipped run-config templates, or print one to start from."""

from __future__ import annotations

import argparse

from partgnn.resources import config_names, configs_dir, resolve_config


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``configs`` to the ``partgnn`` parser."""
    configs = subparsers.add_parser(
        "configs",
        help="list the shipped run configs, or print one (partgnn configs halo > my.yaml)",
        description=(
            "Run configs ship with partgnn and are named by `partgnn train --config NAME`. "
            "Without NAME, lists them with the first line of each; with NAME, prints its YAML."
        ),
    )
    configs.add_argument("name", nargs="?", help="a shipped config's name, e.g. halo")
    configs.set_defaults(run=run_configs)


def run_configs(args: argparse.Namespace) -> int:
    if args.name is not None:
        print(resolve_config(args.name).read_text(), end="")
        return 0
    for name in config_names():
        print(f"{name:<12} {_first_sentence(configs_dir() / f'{name}.yaml')}")
    return 0


def _first_sentence(path) -> str:
    """The first sentence of the comment block a config file starts with."""
    words: list[str] = []
    for line in path.read_text().splitlines():
        text = line.lstrip("#").strip()
        if not line.startswith("#") or not text:
            break
        words.append(text)
    paragraph = " ".join(words)
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[: end + 1]
