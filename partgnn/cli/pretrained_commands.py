"""``partgnn pretrained``: the trained models shipped with partgnn, and their model cards."""

from __future__ import annotations

import argparse

from partgnn.resources import PRETRAINED_PREFIX, pretrained_card, pretrained_names


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``pretrained`` to the ``partgnn`` parser."""
    pretrained = subparsers.add_parser(
        "pretrained",
        help="list the trained models shipped with partgnn, or print one's model card",
        description=(
            "Trained models ship with partgnn: score events before training anything with "
            "`partgnn infer --checkpoint pretrained:NAME`. Without NAME, lists them with the "
            "first line of each card; with NAME, prints its card (config, data and seeds, "
            "held-out figures, score cut)."
        ),
    )
    pretrained.add_argument("name", nargs="?", help="a shipped model's name, e.g. trackml-pt1")
    pretrained.set_defaults(run=run_pretrained)


def run_pretrained(args: argparse.Namespace) -> int:
    if args.name is not None:
        print(pretrained_card(args.name).read_text(), end="")
        return 0
    for name in pretrained_names():
        print(f"{PRETRAINED_PREFIX + name:<26} {_summary(pretrained_card(name).read_text())}")
    return 0


def _summary(card: str) -> str:
    """The card's ``summary``."""
    import yaml

    return str((yaml.safe_load(card) or {}).get("summary", ""))
