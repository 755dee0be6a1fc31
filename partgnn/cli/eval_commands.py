"""Evaluation sub-commands: ``infer`` (scores, distributed) and ``evaluate`` (metrics)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from partgnn.cli.arg_types import (
    efficiency_target,
    non_negative_float,
    rate_target,
    score,
    timeout_seconds,
)
from partgnn.cli.output_guard import add_overwrite_option
from partgnn.data.files import output_kinds
from partgnn.errors import InputError

if TYPE_CHECKING:
    from partgnn.metrics.efficiency_tallies import EfficiencyTallies
    from partgnn.metrics.evaluation_results import EvaluationResults
    from partgnn.metrics.tracks import TrackMetrics

#: Communication schedules of the halo exchange
#: (:data:`partgnn.distributed.exchange_plan.TRANSPORTS`; tests/cli checks they agree). The
#: pipeline is imported when a command runs, so that ``--help`` does not wait for torch.
TRANSPORTS: tuple[str, ...] = ("auto", "all_to_all", "p2p")
#: ``torch.distributed`` backends (:data:`partgnn.distributed.device.BACKENDS`; likewise).
BACKENDS: tuple[str, ...] = ("auto", "nccl", "gloo")
#: How tracks are built from the edges above the cut
#: (:data:`partgnn.metrics.track_building.TRACK_BUILDING_METHODS`; tests/cli checks they agree).
TRACK_BUILDING: tuple[str, ...] = ("components", "walk", "junction")
#: The score cut used when none is given or recorded
#: (:data:`partgnn.metrics.edge_counts.SCORE_CUT`).
SCORE_CUT = 0.5
#: infer's collective timeout [s] when neither --timeout nor PARTGNN_DIST_TIMEOUT sets one.
INFER_TIMEOUT_S = 300.0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``infer`` and ``evaluate`` to the ``partgnn`` parser."""
    infer = subparsers.add_parser(
        "infer", help="score every edge with a trained model (distributed over the shards' P)"
    )
    infer.add_argument("--checkpoint", type=Path, required=True)
    source = infer.add_mutually_exclusive_group(required=True)
    source.add_argument("--shards", type=Path, help="shard directory (one rank per part)")
    source.add_argument("--graphs", type=Path, help="graphs file (one process)")
    infer.add_argument("--out", type=Path, required=True, help="output scores file (.h5)")
    add_overwrite_option(infer, output_kinds.SCORES)
    infer.add_argument(
        "--mode", default=None, metavar="MODE",
        help="compute as a training run of this mode does: halo (default for --shards: the "
        "exchange, the full graph's scores), naive (each sector alone: edges crossing the "
        "boundary get 0), overlapping (each sector extended by the shards' margin, scoring the "
        "edges into its owned nodes); full (default for --graphs)",
    )  # fmt: skip
    infer.add_argument("--naive", action="store_true", help=argparse.SUPPRESS)
    infer.add_argument("--device", default="auto")
    infer.add_argument(
        "--backend", choices=BACKENDS, default="auto",
        help="torch.distributed backend (auto: NCCL with a GPU per rank, else gloo)",
    )  # fmt: skip
    infer.add_argument("--transport", default="auto", choices=TRANSPORTS)
    infer.add_argument(
        "--timeout",
        type=timeout_seconds,
        default=None,
        help=f"collective timeout [s] (default: PARTGNN_DIST_TIMEOUT, else {INFER_TIMEOUT_S:g})",
    )
    infer.add_argument(
        "--model-target", default=None, metavar="PACKAGE.MODULE:CLASS",
        help="allow the checkpoint's own model class (model.target): importing it runs that "
        "module's code, so a checkpoint naming one is refused unless it is named here",
    )  # fmt: skip
    infer.set_defaults(run=run_infer)

    evaluate = subparsers.add_parser("evaluate", help="edge and track metrics of a scores file")
    evaluate.add_argument("scores", type=Path, help="scores file from infer")
    evaluate.add_argument("--graphs", type=Path, required=True, help="the scored graphs file")
    evaluate.add_argument(
        "--events",
        type=Path,
        help="events file: truth weights, hit counts, and the construction efficiency (the "
        "fraction of its target doublets the graphs hold)",
    )
    evaluate.add_argument("--shards", type=Path, help="shards whose cut defines boundary edges")
    cut = evaluate.add_mutually_exclusive_group()
    cut.add_argument(
        "--cut",
        type=score,
        default=None,
        help=f"edge score cut (default: the one training chose, recorded by infer; else "
        f"{SCORE_CUT})",
    )
    cut.add_argument(
        "--cut-at-efficiency",
        type=efficiency_target,
        default=None,
        metavar="E",
        help="choose the cut on these events: the highest that keeps a fraction E of their "
        "target edges (e.g. 0.99 on validation events; pass the cut it prints to --cut for "
        "the test events)",
    )
    cut.add_argument(
        "--cut-at-impure-rate", type=rate_target, default=None, metavar="R",
        help="choose the cut on these events: the lowest at which at most a fraction R of "
        "their tracks (by --track-building) are impure, to 0.001 (e.g. 0.01 on validation "
        "events)",
    )  # fmt: skip
    evaluate.add_argument(
        "--pt-min", type=non_negative_float, default=1.0, help="target particles' pT above [GeV]"
    )
    evaluate.add_argument(
        "--pt-max", type=non_negative_float, default=None,
        help="target particles' pT at most [GeV] (a band with --pt-min; default: no bound)",
    )  # fmt: skip
    evaluate.add_argument(
        "--event-ids", type=int, nargs="+", default=None, help="evaluate only these events"
    )
    evaluate.add_argument(
        "--track-building", choices=TRACK_BUILDING, default="components",
        help="how tracks are built from the edges above the cut: connected components "
        "(default), a walk-through, or components after junction removal",
    )  # fmt: skip
    evaluate.add_argument("--out", type=Path, help="write the metrics as JSON here")
    add_overwrite_option(evaluate, output_kinds.EVALUATION)
    evaluate.add_argument(
        "--plots", type=Path, default=None, metavar="DIR",
        help="draw the target edge and track efficiency against pT and eta, the impure rate "
        "against eta and the edge efficiency in r-z (PNGs, binomial errors, and plotted.json "
        "with the drawn values) into this folder (replaced whole; only a folder of such plots)",
    )  # fmt: skip
    evaluate.set_defaults(run=run_evaluate)


def run_infer(args: argparse.Namespace) -> int:
    from partgnn.distributed.session import distributed_session
    from partgnn.train.inference import run_inference

    if args.naive:  # the option's old name
        if args.mode not in (None, "naive"):
            raise InputError(f"infer: --naive is --mode naive; got --mode {args.mode} too")
        args.mode = "naive"

    with distributed_session(
        device=args.device, backend=args.backend, timeout_s=args.timeout,
        default_timeout_s=INFER_TIMEOUT_S,
        default_timeout_source="the default",
    ) as context:  # fmt: skip
        if args.naive and context.is_main:
            print("partgnn: notice: infer --naive is --mode naive (read as it)", file=sys.stderr)
        n_events = run_inference(
            args.checkpoint,
            args.out,
            context,
            shards=args.shards,
            graphs=args.graphs,
            mode=args.mode,
            transport=args.transport,
            model_target=args.model_target,
        )
    if context.is_main:
        print(f"scored {n_events} events on {context.group_size} ranks -> {args.out}")
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    from partgnn.data.files.output_files import check_output_path
    from partgnn.metrics.evaluation import evaluate_scores

    if args.out is not None:
        check_output_path(args.out)
    tallies = None
    if args.plots is not None:
        from partgnn.data.files.output_files import refuse_foreign_entries
        from partgnn.metrics.efficiency_tallies import EfficiencyTallies

        refuse_foreign_entries(args.plots, _is_plot_file, what="evaluate --plots", option="--plots")
        tallies = EfficiencyTallies()
    metrics = evaluate_scores(
        args.scores,
        args.graphs,
        events_path=args.events,
        shards_path=args.shards,
        cut=args.cut,
        pt_min=args.pt_min,
        event_ids=args.event_ids,
        pt_max=args.pt_max,
        cut_at_efficiency=args.cut_at_efficiency,
        track_building=args.track_building,
        cut_at_impure_rate=args.cut_at_impure_rate,
        tallies=tallies,
    )
    _print_metrics(metrics)
    if args.out is not None:
        metrics.write(args.out)
        print(f"metrics -> {args.out}")
    if tallies is not None:
        _write_plots(args.plots, tallies, metrics)
    return 0


def _is_plot_file(relative: Path) -> bool:
    """Whether a file of a ``--plots`` folder is one evaluate writes."""
    from partgnn.metrics.report.efficiency_plots import PLOTTED_FILE

    return relative.suffix == ".png" or relative.name == PLOTTED_FILE


def _write_plots(folder: Path, tallies: EfficiencyTallies, metrics: EvaluationResults) -> None:
    from partgnn.data.files.output_files import atomic_directory
    from partgnn.metrics.report.efficiency_plots import write_efficiency_plots

    low, high = metrics.target_pt
    subtitle = (f"{metrics.events} events, cut {metrics.cut:.4g}, targets {_target_band(metrics)}, "
                f"tracks by {metrics.track_building}")  # fmt: skip
    with atomic_directory(folder, _is_plot_file, what="evaluate --plots", option="--plots") as out:
        written = write_efficiency_plots(tallies, out, pt_min=low, pt_max=high, subtitle=subtitle)
    print(f"plots -> {folder}/ ({', '.join(p.name for p in written)})")


def _target_band(metrics: EvaluationResults) -> str:
    """``pT > 1 GeV`` or ``0.5 < pT <= 1 GeV``: the target particles evaluated."""
    assert metrics.target_pt is not None  # evaluate_scores records it
    low, high = metrics.target_pt
    return f"pT > {low:g} GeV" if high is None else f"{low:g} < pT <= {high:g} GeV"


def _note(name: str, track: TrackMetrics) -> str:
    """What a printed track metric needs said beside it."""
    if name == "trackml_score_max" and track.trackml_score_max is not None:
        return "  (the weight of the graphs' hits: 1 for whole events)"
    if name == "trackml_score" and (track.trackml_score_max or 1.0) < 0.999:
        return (
            f"  (of at most {track.trackml_score_max:.4f}: these graphs hold part of each "
            "event's hits, and the score is not normalised to them)"
        )
    return ""


def _print_metrics(metrics: EvaluationResults) -> None:
    import dataclasses

    print(
        f"{metrics.events} events, score cut {metrics.cut:.9g} ({metrics.cut_source}), "
        f"target particles {_target_band(metrics)}, tracks by {metrics.track_building}"
    )
    sections = (("edge", metrics.edge), ("track", metrics.track),
                ("construction", metrics.construction))  # fmt: skip
    for section, figures in sections:
        if figures is None:
            continue  # construction: counted from the events file, when given
        print(f"  {section} metrics:")
        for field in dataclasses.fields(figures):
            value = getattr(figures, field.name)
            missing = value is None or (isinstance(value, float) and math.isnan(value))
            shown = "n/a" if missing else f"{value:.4f}"
            print(f"    {field.name:<28} {shown}{_note(field.name, metrics.track)}")
