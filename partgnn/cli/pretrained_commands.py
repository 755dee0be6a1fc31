"""``partgnn pretrained``: the trained models shipped with partgnn, and their model cards."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from partgnn.cli.arg_types import positive_int
from partgnn.errors import InputError
from partgnn.resources import PRETRAINED_PREFIX, pretrained_card, pretrained_names

if TYPE_CHECKING:
    from partgnn.metrics.evaluation_results import EvaluationResults
    from partgnn.workflows.pretrained_evaluation import PretrainedEvaluation


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
    pretrained.add_argument(
        "--make-map", action="store_true",
        help="fit the module map NAME's graphs are built with, as its card records, into "
        "partgnn's cache ($PARTGNN_CACHE, else ~/.cache/partgnn), checked against the card's "
        "checksum; then build-graphs --map pretrained:NAME uses it",
    )  # fmt: skip
    pretrained.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        help="processes simulating for --make-map (default 1)",
    )
    pretrained.add_argument(
        "--evaluate", type=Path, default=None, metavar="EVENTS", dest="events",
        help="an events file (partgnn import-trackml, simulate): build its graphs the card's "
        "way, score them with NAME, evaluate them at the card's cut (construction, edges, "
        "tracks and the construction's limit) and print the figures beside the card's",
    )  # fmt: skip
    pretrained.add_argument(
        "--work", type=Path, default=None,
        help="folder for --evaluate's graphs, scores and evaluation JSON files, written whole "
        "(default: EVENTS-NAME-evaluation in the working directory); an existing folder is "
        "replaced only when it holds nothing but an earlier evaluation's files",
    )  # fmt: skip
    pretrained.set_defaults(run=run_pretrained)


def run_pretrained(args: argparse.Namespace) -> int:
    if args.work is not None and args.events is None:
        raise InputError("pretrained: --work is the folder of --evaluate EVENTS; give both")
    if args.workers is not None and not args.make_map:
        raise InputError("pretrained: --workers is for --make-map's simulation; give both")
    if args.events is not None and args.make_map:
        raise InputError("pretrained: --evaluate and --make-map are separate runs; give one")
    if args.events is not None:
        return run_evaluate_pretrained(args)
    if args.make_map:
        from partgnn.data.module_map.pretrained_maps import make_map

        if args.name is None:
            raise InputError("pretrained --make-map: name the model, e.g. pretrained:trackml-full")
        path, verdict = make_map(args.name, workers=args.workers or 1)
        print(f"{args.name}: module map {path}: {verdict}")
        return 0
    if args.name is not None:
        print(pretrained_card(args.name).read_text(), end="")
        return 0
    from partgnn.data.files.model_card import ModelCard

    for name in pretrained_names():
        print(f"{PRETRAINED_PREFIX + name:<26} {ModelCard.read(name).summary}")
    return 0


#: The figures printed beside the card's: (label, the card's name of the figure, the figure of
#: an evaluation, whether it is a track figure that the construction's limit bounds).
FIGURES: tuple[tuple[str, str, Callable[[EvaluationResults], float], bool], ...] = (
    ("construction: target doublets held", "construction_efficiency",
     lambda e: e.construction.efficiency if e.construction else math.nan, False),
    ("  of beam-line particles", "construction_beam_line_efficiency",
     lambda e: e.construction.beam_line_efficiency if e.construction else math.nan, False),
    ("target edge efficiency (of those held)", "edge_target_efficiency",
     lambda e: e.edge.target_efficiency, False),
    ("masked purity", "edge_masked_purity", lambda e: e.edge.masked_purity, False),
    ("track efficiency, double majority", "track_efficiency", lambda e: e.track.efficiency, True),
    ("track efficiency, ATLAS matching", "track_efficiency_atlas",
     lambda e: e.track.efficiency_atlas, True),
)  # fmt: skip


def figures_table(result: PretrainedEvaluation) -> list[str]:
    """Markdown lines: the figures of ``result`` beside the card's simulated held-out ones."""
    from partgnn.data.files.model_card import ModelCard
    from partgnn.workflows.pretrained_evaluation import CARD_HELD_OUT, CARD_LIMIT

    card = ModelCard.read(result.model)
    evaluation, limit = result.evaluation, result.limit
    lines = [
        f"pretrained:{result.model} on {result.events} ({_events(evaluation.events or 0)}), "
        f"cut {result.cut:.4g}, tracks by {result.track_building}",
        "",
        "| figure | these events | card: simulated held-out |",
        "|---|---|---|",
    ]
    for label, card_name, figure, bounded in FIGURES:
        mine = figure(evaluation)
        theirs = card.figure(CARD_HELD_OUT, card_name)
        if bounded:
            mine_limit = figure(limit)
            theirs_limit = card.figure(CARD_LIMIT, card_name)
            lines.append(f"| {label} | {_of(mine, mine_limit)} | {_of(theirs, theirs_limit)} |")
        else:
            lines.append(f"| {label} | {_shown(mine)} | {_shown(theirs)} |")
    return lines


def run_evaluate_pretrained(args: argparse.Namespace) -> int:
    """The ``--evaluate`` action of ``partgnn pretrained``."""
    from partgnn.workflows.pretrained_evaluation import (
        default_work_folder,
        evaluate_pretrained,
    )

    if args.name is None:
        raise InputError("pretrained --evaluate: name the model, e.g. pretrained:trackml-full")
    work = args.work if args.work is not None else default_work_folder(args.events, args.name)
    result = evaluate_pretrained(args.name, args.events, work)
    print("\n".join(figures_table(result)))
    print(f"\ngraphs, scores and evaluations in {work}/")
    return 0


def _shown(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{float(value):.4f}"


def _of(value: object, limit: object) -> str:
    """``value`` and its fraction of ``limit``: ``0.9815 (0.9815 of 1.0000)``."""
    if _shown(value) == "-":
        return "-"
    if _shown(limit) == "-" or not float(limit):
        return _shown(value)
    return f"{float(value):.4f} ({float(value) / float(limit):.4f} of {float(limit):.4f})"


def _events(count: int) -> str:
    return f"{count} event" + ("s" if count != 1 else "")
