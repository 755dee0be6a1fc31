"""A shipped model on events of one's own (real TrackML events, say), built, scored and evaluated
as its card was (``partgnn pretrained NAME --evaluate EVENTS`` prints it beside the card;
``partgnn.evaluate_pretrained`` in a script).

The events' graphs are built the card's way (its ``construction``: the module map that ships
with the model, or the geometric builder with its pT cut), scored with the model, and evaluated
at the card's cut for the card's target particles, tracks built by the card's
``track_building`` (``components`` on a card without one); the same graphs with perfect scores
(the truth) give the limit the construction leaves to track finding. Writes into ``--work``
``graphs.h5``, ``scores.h5``, ``scores-truth.h5``, ``evaluation.json`` and
``evaluation-limit.json`` (the format of ``partgnn evaluate --out``, which
``tools/make_pretrained.py --evaluation`` records on a card). The folder is written whole
(staged beside it, renamed into place when everything is written): an interrupted evaluation
leaves the folder as it was, and an existing folder is replaced only when it holds nothing but
an earlier evaluation's files; the events file may not lie inside it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from partgnn.data.files import output_kinds
from partgnn.data.files.model_card import HeldOutFigures, ModelCard
from partgnn.data.files.output_files import refuse_output_over
from partgnn.errors import InputError
from partgnn.resources import PRETRAINED_PREFIX

if TYPE_CHECKING:
    from partgnn.metrics.evaluation_results import EvaluationResults

#: The card's simulated held-out figures and construction limit (``held_out`` labels).
CARD_HELD_OUT, CARD_LIMIT = "simulated", "construction-limit"
#: The files an evaluation writes into its folder, and their kinds.
WORK_FILES = {
    "graphs.h5": output_kinds.GRAPHS,
    "scores.h5": output_kinds.SCORES,
    "scores-truth.h5": output_kinds.SCORES,
    "evaluation.json": output_kinds.EVALUATION,
    "evaluation-limit.json": output_kinds.EVALUATION,
}
#: What writes the folder, in the lines that refuse or replace it.
COMMAND = "pretrained --evaluate"


def default_work_folder(events: Path, model: str) -> Path:
    """``EVENTS-MODEL-evaluation`` in the working directory: one folder per events file and
    model, so evaluating another model keeps the first one's results."""
    return Path(f"{events.stem}-{model.removeprefix(PRETRAINED_PREFIX)}-evaluation")


def is_work_file(work: Path, relative: Path) -> bool:
    """Whether ``work / relative`` is a file an evaluation writes there, of its kind."""
    kind = WORK_FILES.get(relative.as_posix())
    return kind is not None and kind.recognises(work / relative)


def card_track_building(card: ModelCard) -> str:
    """The track building a card's figures were measured with (its ``track_building``).

    Raises:
        InputError: The card names a method :func:`~partgnn.metrics.track_building.build_tracks`
            does not know.
    """
    from partgnn.metrics.track_building import TRACK_BUILDING_METHODS

    method = card.track_building
    if method not in TRACK_BUILDING_METHODS:
        raise InputError(
            f"{card.path}: track_building {method!r} is not one of "
            f"{', '.join(TRACK_BUILDING_METHODS)}"
        )
    return method


@dataclass(frozen=True)
class PretrainedEvaluation:
    """A shipped model evaluated on events of one's own.

    Attributes:
        model: The model's name.
        events: The events file.
        cut: The card's score cut.
        track_building: How tracks were built (the card's way).
        evaluation: The model's scores evaluated.
        limit: The graphs' truth as scores evaluated: what the construction leaves.
    """

    model: str
    events: Path
    cut: float
    track_building: str
    evaluation: EvaluationResults
    limit: EvaluationResults


def evaluate_pretrained(name: str, events: Path, work: Path) -> PretrainedEvaluation:
    """Builds, scores and evaluates ``events`` as ``name``'s card says; returns the figures.

    Args:
        name: ``NAME`` or ``pretrained:NAME``.
        events: An events file (``partgnn simulate``, ``partgnn import-trackml``).
        work: Folder for the graphs, scores and evaluation files: made, or replaced when it
            holds only an earlier evaluation's files (:data:`WORK_FILES`); written whole, so
            an interruption leaves it as it was.

    Returns:
        The model, events, cut and track building, and the two evaluations as ``partgnn
        evaluate --out`` writes them.

    Raises:
        InputError: The card records no construction or an unknown track building; ``work``
            holds the events, is a file, or holds files an evaluation does not write; or a
            step fails (its line).
    """
    from partgnn.data.files.output_files import atomic_directory

    card = ModelCard.read(name)
    name = card.path.stem
    if card.construction is None:
        raise InputError(f"{card.path}: the card records no construction; cannot build graphs")
    if card.score_cut is None:
        raise InputError(f"{card.path}: the card records no score_cut; cannot evaluate at it")
    track_building = card_track_building(card)
    pt_min, pt_max = card.held_out.get(CARD_HELD_OUT, HeldOutFigures()).target_pt
    if not events.is_file():
        raise InputError(f"{events}: no such events file")
    refuse_output_over(work, iter([("EVENTS", events)]), folder=True, option="work")
    replacing = work.is_dir()
    with atomic_directory(
        work, partial(is_work_file, work), what=COMMAND, option="--work"
    ) as staging:
        if replacing:
            print(f"partgnn: {COMMAND}: replacing {work} (an earlier evaluation's files)",
                  file=sys.stderr)  # fmt: skip
        evaluation, limit = _build_score_evaluate(
            name, card, events, staging, track_building, (pt_min, pt_max)
        )
    return PretrainedEvaluation(name, events, card.score_cut, track_building, evaluation,
                                limit)  # fmt: skip


def _build_score_evaluate(
    name: str,
    card: ModelCard,
    events: Path,
    work: Path,
    track_building: str,
    target_pt: tuple[float, float | None],
) -> tuple[EvaluationResults, EvaluationResults]:
    """Writes the graphs, scores and evaluations of ``events`` into ``work``; returns the
    model's evaluation and the construction's limit."""
    from partgnn.data.detector.geometry import load_geometry
    from partgnn.data.files.h5_files import file_sha256
    from partgnn.data.files.storage import GraphFile
    from partgnn.data.files.writers import write_scores
    from partgnn.data.graphs.event_graphs import write_event_graphs
    from partgnn.data.graphs.graph_config import GraphBuildConfig
    from partgnn.data.module_map.pretrained_maps import resolve_map
    from partgnn.distributed.context import DistContext
    from partgnn.metrics.evaluation import evaluate_scores
    from partgnn.train.inference import run_inference

    construction = card.construction
    graphs, scores = work / "graphs.h5", work / "scores.h5"
    geometry = load_geometry(None)
    if construction.by_module_map:
        map_path, cuts = resolve_map(PRETRAINED_PREFIX + name), GraphBuildConfig()
    else:
        map_path, cuts = None, GraphBuildConfig(pt_min=construction.pt_min)
    write_event_graphs(events, graphs, geometry, cuts.resolved(geometry.b_field), map_path)
    one_process = DistContext.one_process("cpu")
    run_inference(PRETRAINED_PREFIX + name, scores, one_process, graphs=graphs)
    cut = card.score_cut
    pt_min, pt_max = target_pt
    options = {"pt_min": pt_min, "pt_max": pt_max, "track_building": track_building}
    evaluation = evaluate_scores(scores, graphs, events_path=events, cut=cut, **options)
    truth = work / "scores-truth.h5"
    with GraphFile(graphs) as graph_file:
        items = [(int(graph.event_id), graph.y.numpy()) for graph in graph_file]
    write_scores(truth, items, provenance={"source_sha256": file_sha256(graphs)})
    limit = evaluate_scores(truth, graphs, events_path=events, cut=0.5, **options)
    evaluation.write(work / "evaluation.json")
    limit.write(work / "evaluation-limit.json")
    return evaluation, limit
