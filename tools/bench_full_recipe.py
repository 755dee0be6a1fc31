"""The full-graph recipe (shipped config full-recipe): halo training on P ranks, then held-out
figures at a score cut chosen on validation events.

Simulates pile-up-200 events and builds *full* event graphs (every hit, no pT cut) with the
module map ``--map`` (``partgnn fit-module-map``; the recipe's map: configs/full-recipe.yaml;
without ``--map``, the geometric builder): training events (the trainer's validation events are
the last ``--val-events`` of them), separate validation events for the score cut, and held-out
test events; partitions the training graphs for ``--ranks`` ranks (``--method``, METIS by
default); trains the recipe in halo mode under ``torchrun`` with ``--resume auto``, for at most
``--minutes`` of wall time (then the ranks get the trainer's stop signal, checkpoint and stop),
so each run of the script is one sitting that continues the last one (the sittings' start and
stop go to ``OUT/sittings.json``: CPU hours are ranks x their wall time); then scores the
validation and test events in one process, chooses the cut on the validation events (the
highest keeping ``--efficiency`` of their pT > 1 GeV target edges; with ``--impure-rate R``, the
lowest at which at most R of their tracks are impure) and evaluates the test
events at that cut: pT > 1 GeV targets, the 0.5-1 GeV band, and perfect scores (the
construction limit), tracks built by ``--track-building`` (components by default). Prints
markdown tables::

    OMP_NUM_THREADS=1 .venv/bin/python tools/bench_full_recipe.py --out bench-full \\
        --map data/full/map.npz --minutes 60

``--set key=value`` is passed to training; ``--tables-only`` re-prints a finished run's tables;
``--no-train`` scores the last checkpoint without another sitting (and makes no training data);
``--no-score`` stops after the sitting; ``--realism module-planes field-profile secondaries``
simulates with those switches of ``partgnn simulate`` (issue 50); ``--workers N`` simulates and
builds graphs on N processes (the same files). ``--ranks 1`` trains in full mode (no shards), on
a GPU where one is (``run.device`` auto): a lent GPU trains the recipe in minutes, and the run's
directory, brought back, is scored here with ``--no-train``::

    python3 tools/bench_full_recipe.py --out W --map MAP --realism ... --ranks 1 --workers 16 \
        --no-score --minutes 6 --set model.recompute=false --set model.fused=false
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import sys
from functools import partial
from pathlib import Path

from _common import (
    ToolParser,
    add_realism_option,
    machine,
    partgnn,
    realism_arguments,
    record_evaluations,
    recorded_sitting,
)
from _paths import shipped_config

from partgnn.data.files.h5_files import file_sha256
from partgnn.data.files.storage import EventFile, GraphFile
from partgnn.data.files.writers import write_scores
from partgnn.metrics.evaluation_results import EvaluationResults
from partgnn.metrics.track_building import TRACK_BUILDING_METHODS
from partgnn.train.run_directory.saved_model import SavedModel

#: One partgnn command, echoed to stderr, in a process of its own: data preparation in this
#: process left it holding ~2.5 GB through the sitting that followed (450 training events),
#: memory the two ranks then lacked on a 24 GB machine (steps 1.34 -> 1.8 s).
_partgnn = partial(partgnn, echo=True, threads=None, in_process=False)
CONFIG = shipped_config("full-recipe")
#: name -> (seed, first event id) of the simulated datasets; the event counts are arguments.
DATASETS = {"train": (11, 0), "val": (12, 1000), "test": (13, 2000)}
#: The step of the checkpoint the evaluation files are of (written after they all are).
SCORED = "scored-step.json"


def main() -> None:
    parser = ToolParser(__doc__, figures="recipe_full")
    parser.add_argument("--train-events", type=int, default=148)
    parser.add_argument("--val-events", type=int, default=2, help="the trainer's, in the file")
    parser.add_argument("--cut-events", type=int, default=10, help="validation events for the cut")
    parser.add_argument("--test-events", type=int, default=30)
    parser.add_argument("--pileup", type=float, default=200.0)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--method", default="metis")
    cut_rule = parser.add_mutually_exclusive_group()
    cut_rule.add_argument("--efficiency", type=float, default=0.993)
    cut_rule.add_argument(
        "--impure-rate", type=float, default=None,
        help="choose the cut by evaluate --cut-at-impure-rate (instead of --efficiency)",
    )  # fmt: skip
    parser.add_argument(
        "--track-building", choices=TRACK_BUILDING_METHODS, default="components",
        help="how the evaluations build tracks (partgnn evaluate --track-building)",
    )  # fmt: skip
    parser.add_argument("--minutes", type=float, default=None, help="wall time of this sitting")
    parser.add_argument("--no-train", action="store_true", help="score the last checkpoint")
    parser.add_argument("--no-score", action="store_true", help="stop after the sitting")
    parser.add_argument("--workers", type=int, default=1, help="processes making the data")
    parser.add_argument("--out", type=Path, default=Path("bench-full"))
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    parser.add_argument("--tables-only", action="store_true")
    add_realism_option(parser)
    parser.add_argument(
        "--map", type=Path, default=None,
        help="build the graphs with this module map (build-graphs --method module-map)",
    )  # fmt: skip
    parser.tiny(
        train_events=2,
        val_events=1,
        cut_events=1,
        test_events=1,
        pileup=3.0,
        overrides=[
            "optim.epochs=1",
            "optim.max_steps=2",
            "model.fused=false",
            "run.bf16=false",
            "data.cache_mb=64",
        ],
    )
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    run_dir = out / "run"
    if not args.tables_only:
        counts = {
            "train": 0 if args.no_train else args.train_events + args.val_events,
            "val": 0 if args.no_score else args.cut_events,
            "test": 0 if args.no_score else args.test_events,
        }
        for name, n_events in counts.items():
            if n_events:
                _make_graphs(out, name, n_events, args, workers=args.workers)
        if not args.no_train:
            _train(out, run_dir, _training_data(out, args), args)
        if not args.no_score:
            rule = (
                ("--cut-at-efficiency", str(args.efficiency))
                if args.impure_rate is None
                else ("--cut-at-impure-rate", str(args.impure_rate))
            )
            _score_and_evaluate(out, run_dir, rule, args.track_building)
    _print_tables(out, run_dir, args.ranks, args.record)


def _make_graphs(
    out: Path, name: str, n_events: int, args: argparse.Namespace, *, workers: int
) -> None:
    seed, first = DATASETS[name]
    events, graphs = out / f"events-{name}.h5", out / f"graphs-{name}.h5"
    if graphs.exists():
        return
    if not events.exists():  # (a sitting stopped between the two keeps its events)
        _partgnn(
            "simulate", "--events", str(n_events), "--pileup", f"{args.pileup:g}",
            "--seed", str(seed), "--first-event-id", str(first),
            *realism_arguments(args.realism), "--workers", str(workers), "--out", str(events),
        )  # fmt: skip
    with EventFile(events) as held:
        if len(held) != n_events:
            sys.exit(f"{events} holds {len(held)} events, not {n_events}: remove it, or ask that")
    method = ("--method", "module-map", "--map", str(args.map)) if args.map else ()
    _partgnn("build-graphs", str(events), *method, "--workers", str(workers), "--out", str(graphs))


def _training_data(out: Path, args: argparse.Namespace) -> list[str]:
    """The training overrides naming the data: the graphs file in full mode (``--ranks 1``),
    else METIS (``--method``) shards of it for halo mode, partitioned here once."""
    if args.ranks == 1:
        return ["mode=full", f"data.graphs={out / 'graphs-train.h5'}"]
    shards = out / f"{args.method}{args.ranks}"
    if not (shards / "meta.json").exists():
        _partgnn(
            "partition", str(out / "graphs-train.h5"), "--parts", str(args.ranks),
            "--method", args.method, "--workers", str(args.workers), "--out", str(shards),
        )  # fmt: skip
    return ["mode=halo", f"data.shards={shards}"]


def _train(out: Path, run_dir: Path, data: list[str], args: argparse.Namespace) -> None:
    """One sitting of the recipe on ``args.ranks`` ranks (to the end of its epochs, or stopped
    after ``args.minutes``); its start and stop go to ``OUT/sittings.json``, with the machine
    (:func:`machine`: its GPU, when one trains)."""
    overrides = [
        *data,
        f"data.val_events={args.val_events}",
        f"run.dir={run_dir}",
        "run.progress=false",
        *args.overrides,
    ]
    recorded_sitting(
        CONFIG, overrides, args.ranks, run_dir=run_dir, sittings=out / "sittings.json",
        note=[*data[:1], *args.overrides, f"machine: {machine()}"], minutes=args.minutes,
    )  # fmt: skip


def _score_and_evaluate(
    out: Path, run_dir: Path, cut_rule: tuple[str, str], track_building: str
) -> None:
    checkpoint = run_dir / "checkpoints" / "last.pt"
    (out / SCORED).unlink(missing_ok=True)  # the evaluations below are of no recorded step yet
    for name in ("val", "test"):
        _partgnn(
            "infer",
            "--checkpoint",
            str(checkpoint),
            "--graphs",
            str(out / f"graphs-{name}.h5"),
            "--out",
            str(out / f"scores-{name}.h5"),
            "--device",
            "cpu",
        )
    evaluate = partial(_evaluate, out, track_building=track_building)
    chosen = evaluate("val", "evaluation-val.json", *cut_rule)
    cut = f"{chosen.cut!r}"
    evaluate("test", "evaluation-test.json", "--cut", cut)
    evaluate(
        "test", "evaluation-test-low-pt.json", "--cut", cut, "--pt-min", "0.5", "--pt-max", "1"
    )
    perfect = out / "scores-test-perfect.h5"
    with GraphFile(out / "graphs-test.h5") as graph_file:
        truth = [(int(g.event_id), g.y.numpy()) for g in graph_file]
    write_scores(perfect, truth, provenance={"source_sha256": file_sha256(out / "graphs-test.h5")})
    evaluate("test", "evaluation-perfect.json", "--cut", "0.5", scores=perfect)
    evaluate(
        "test",
        "evaluation-perfect-low-pt.json",
        "--cut",
        "0.5",
        "--pt-min",
        "0.5",
        "--pt-max",
        "1",
        scores=perfect,
    )
    (out / SCORED).write_text(json.dumps({"step": SavedModel.read(checkpoint).step}))


def _evaluate(
    out: Path, name: str, result: str, *options: str, track_building: str,
    scores: Path | None = None,
) -> dict:  # fmt: skip
    scores = scores or out / f"scores-{name}.h5"
    _partgnn(
        "evaluate",
        str(scores),
        "--graphs",
        str(out / f"graphs-{name}.h5"),
        "--events",
        str(out / f"events-{name}.h5"),
        "--out",
        str(out / result),
        "--track-building",
        track_building,
        *options,
    )
    return EvaluationResults.read(out / result)


def _print_tables(out: Path, run_dir: Path, ranks: int, record: Path | None = None) -> None:
    sittings_path = out / "sittings.json"
    sittings = json.loads(sittings_path.read_text()) if sittings_path.exists() else []
    walls = [s["stop"] - s["start"] for s in sittings]
    last = run_dir / "checkpoints" / "last.pt"
    steps = SavedModel.read(last).step if last.exists() else 0
    trained_on = sorted(
        {note.removeprefix("machine: ") for s in sittings for note in s["overrides"]
         if note.startswith("machine: ")}
    )  # fmt: skip
    on_gpus = bool(trained_on) and all("no GPU" not in m for m in trained_on)
    print(
        f"scored on: {os.cpu_count()} cores ({platform.machine()}), "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}; trained on: "
        f"{'; '.join(trained_on) or 'not recorded (this machine)'}; {steps} "
        f"steps; training wall time {sum(walls) / 60:.1f} min in {len(walls)} sitting(s) "
        f"({', '.join(f'{w / 60:.1f}' for w in walls)} min), "
        f"{ranks * sum(walls) / 3600:.2f} {'GPU' if on_gpus else 'CPU'} hours on {ranks} rank(s)\n"
    )
    with open(run_dir / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    print(
        "| epoch | step | train loss | val loss | val target efficiency / purity* (best cut) "
        "| best cut | step time [s] |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['epoch']} | {row['step']} | {float(row['train_loss']):.4f} "
            f"| {float(row['val_loss']):.4f} | {float(row['val_best_cut_efficiency']):.4f} / "
            f"{float(row['val_best_cut_purity']):.4f} | {float(row['val_best_cut']):.3f} "
            f"| {float(row['step_time_s']):.2f} |"
        )
    print(
        "\n*in training, over the edges the loss weighs (non-target true edges left out).\n\n"
        "Track efficiency: double majority (ATLAS matching beside it, at 0.5, tracks of >= 5 "
        "hits); fake rate: double majority's (it counts pure fragments of particles the graph "
        "does not join); impure rate: ATLAS's fake rate.\n\n"
        "| events | cut | target edge efficiency | masked purity | edge purity | AUC "
        "| track efficiency (ATLAS) | fake rate | impure rate | duplicate rate |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = (
        ("evaluation-val.json", "validation (cut chosen here), pT > 1"),
        ("evaluation-test.json", "held-out, pT > 1"),
        ("evaluation-perfect.json", "held-out, perfect scores, pT > 1"),
        ("evaluation-test-low-pt.json", "held-out, 0.5 < pT <= 1"),
        ("evaluation-perfect-low-pt.json", "held-out, perfect scores, 0.5 < pT <= 1"),
    )
    scored = json.loads((out / SCORED).read_text())["step"] if (out / SCORED).exists() else None
    if scored != steps and any((out / name).exists() for name, _ in rows):
        print(
            f"\n(the evaluations below are of "
            f"{'an unrecorded checkpoint' if scored is None else f'the step {scored} checkpoint'}, "
            f"not of the run's last (step {steps}): "
            "run without --no-score to score it)"
        )
    results = {}
    for name, label in rows:
        if not (out / name).exists():
            continue
        r = results[name] = EvaluationResults.read(out / name)
        edge, track = r.edge, r.track
        print(
            f"| {label} ({r.events}) | {r.cut:.6g} | {edge.target_efficiency:.4f} "
            f"| {edge.masked_purity:.4f} | {edge.purity:.4f} | {edge.auc:.5f} "
            f"| {track.efficiency:.4f} ({track.efficiency_atlas:.4f}) "
            f"| {track.fake_rate:.4f} | {track.impure_rate:.4f} "
            f"| {track.duplicate_rate:.4f} |"
        )
    if record is not None and scored != steps:
        sys.exit("bench_full_recipe: --record: the evaluations are not of the run's last "
                 "checkpoint (run without --no-score to score it)")  # fmt: skip
    labels = dict(rows)
    record_evaluations(
        record, "evaluations",
        f"The full recipe's model (step {scored}) on its events: validation (where the cut is "
        "chosen), held-out, and the held-out graphs' truth scored (the construction's limit)",
        {labels[name]: result for name, result in results.items()},
    )  # fmt: skip
    for band, (test, perfect) in {
        "pT > 1": ("evaluation-test.json", "evaluation-perfect.json"),
        "0.5 < pT <= 1": ("evaluation-test-low-pt.json", "evaluation-perfect-low-pt.json"),
    }.items():
        if test in results and perfect in results:
            found, limit = results[test].track, results[perfect].track
            print(
                f"\ntrack efficiency / construction limit ({band}): double majority "
                f"{found.efficiency / limit.efficiency:.4f}, ATLAS "
                f"{found.efficiency_atlas / limit.efficiency_atlas:.4f}"
            )


if __name__ == "__main__":
    main()
