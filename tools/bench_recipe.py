"""The physics-grade recipe (shipped config recipe): train, then score held-out and real events.

Simulates pile-up-200 events (training + validation in one file, held-out test events in
another), builds pT > 1 GeV graphs, trains the recipe in one process, scores the test events
and the real TrackML sample event with the score cut chosen on the validation events, and scores
the test events with perfect scores (the truth) for the graph-construction limit. Prints
markdown tables (learning curve, held-out and real-event metrics):

    OMP_NUM_THREADS=2 .venv/bin/python tools/bench_recipe.py --out bench-recipe

``--set key=value`` is passed to training (e.g. ``--set optim.epochs=2`` for a quick check);
``--map MAP.npz`` builds the graphs with a module map (``partgnn fit-module-map``) instead of
the geometric builder; ``--realism module-planes field-profile secondaries`` simulates with
those switches of ``partgnn simulate`` (issue 50).
"""

from __future__ import annotations

import csv
import os
import platform
import time
from functools import partial
from pathlib import Path

from _common import (
    ToolParser,
    add_realism_option,
    partgnn,
    realism_arguments,
    record_evaluations,
)
from _paths import sample_dir, shipped_config

from partgnn.data.files.h5_files import file_sha256
from partgnn.data.files.storage import GraphFile
from partgnn.data.files.writers import write_scores
from partgnn.metrics.evaluation_results import EvaluationResults

#: One partgnn command, echoed to stderr; data preparation runs in this process.
_partgnn = partial(partgnn, echo=True, threads=None)
CONFIG = shipped_config("recipe")


def main() -> None:
    parser = ToolParser(__doc__, figures="recipe_pt1")
    parser.add_argument("--train-events", type=int, default=100)
    parser.add_argument("--val-events", type=int, default=5)
    parser.add_argument("--test-events", type=int, default=5)
    parser.add_argument("--pileup", type=float, default=200.0)
    parser.add_argument("--out", type=Path, default=Path("bench-recipe"))
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    parser.add_argument(
        "--map", type=Path, default=None,
        help="build the graphs with this module map (build-graphs --method module-map)",
    )  # fmt: skip
    parser.add_argument(
        "--tables-only", action="store_true", help="re-print the tables of a finished run in --out"
    )
    add_realism_option(parser)
    parser.tiny(
        train_events=2,
        val_events=1,
        test_events=1,
        pileup=3.0,
        overrides=["optim.epochs=1", "optim.max_steps=2", "model.fused=false", "run.bf16=false"],
    )
    args = parser.parse_args()
    out = args.out
    if args.tables_only:
        _print_tables(out / "run", _saved_results(out), None, args.record)
        return
    out.mkdir(parents=True, exist_ok=True)
    n_train = args.train_events + args.val_events
    datasets = {
        "train": ("simulate", "--events", str(n_train), "--seed", "11"),
        "test": (
            "simulate",
            "--events",
            str(args.test_events),
            "--seed",
            "13",
            "--first-event-id",
            "2000",
        ),
    }
    sample = sample_dir()
    if sample is not None:
        datasets["sample"] = ("import-trackml", str(sample))
    for name, command in datasets.items():
        if not (out / f"graphs-{name}.h5").exists():
            extra = ()
            if command[0] == "simulate":
                extra = ("--pileup", f"{args.pileup:g}", *realism_arguments(args.realism))
            _partgnn(*command, *extra, "--out", str(out / f"events-{name}.h5"))
            _partgnn(
                "build-graphs",
                str(out / f"events-{name}.h5"),
                "--out",
                str(out / f"graphs-{name}.h5"),
                "--pt-min",
                "1.0",
                *(("--method", "module-map", "--map", str(args.map)) if args.map else ()),
            )
    run_dir = out / "run"
    overrides = [
        f"data.graphs={out / 'graphs-train.h5'}",
        f"data.val_events={args.val_events}",
        f"run.dir={run_dir}",
        "run.progress=false",
        *args.overrides,
    ]
    start = time.perf_counter()
    _partgnn(
        "train", "--replace", "--config", str(CONFIG), *(a for o in overrides for a in ("--set", o))
    )
    train_seconds = time.perf_counter() - start
    checkpoint = run_dir / "checkpoints" / "last.pt"

    results = {}
    for name in ("test", "sample"):
        if name not in datasets:
            continue
        graphs, events = out / f"graphs-{name}.h5", out / f"events-{name}.h5"
        scores = out / f"scores-{name}.h5"
        _partgnn(
            "infer",
            "--checkpoint",
            str(checkpoint),
            "--graphs",
            str(graphs),
            "--out",
            str(scores),
            "--device",
            "cpu",
        )
        results[name] = _evaluate(scores, graphs, events, out / f"evaluation-{name}.json")
        if name == "test":
            perfect = out / "scores-test-perfect.h5"
            _write_truth_scores(graphs, perfect)
            results["perfect"] = _evaluate(
                perfect, graphs, events, out / "evaluation-perfect.json", cut=0.5
            )
    _print_tables(run_dir, results, train_seconds, args.record)


def _evaluate(
    scores: Path, graphs: Path, events: Path, out: Path, cut: float | None = None
) -> dict:
    command = [
        "evaluate",
        str(scores),
        "--graphs",
        str(graphs),
        "--events",
        str(events),
        "--out",
        str(out),
    ]
    if cut is not None:
        command += ["--cut", str(cut)]
    _partgnn(*command)
    return EvaluationResults.read(out)


def _saved_results(out: Path) -> dict:
    names = {
        "test": "evaluation-test.json",
        "perfect": "evaluation-perfect.json",
        "sample": "evaluation-sample.json",
    }
    return {k: EvaluationResults.read(out / v) for k, v in names.items() if (out / v).exists()}


def _write_truth_scores(graphs: Path, out: Path) -> None:
    with GraphFile(graphs) as graph_file:
        items = [(int(g.event_id), g.y.numpy()) for g in graph_file]
    write_scores(out, items, provenance={"source_sha256": file_sha256(graphs)})


def _print_tables(
    run_dir: Path, results: dict, train_seconds: float | None, record: Path | None = None
) -> None:
    from partgnn.metrics.run_summary import RunSummary

    summary = RunSummary.read(run_dir)
    wall = train_seconds if train_seconds is not None else summary.wall_time_s
    print(
        f"machine: {os.cpu_count()} cores ({platform.machine()}), "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}; "
        f"training wall time {wall / 60:.1f} min, {summary.steps} steps\n"
    )
    with open(run_dir / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    print(
        "| epoch | step | train loss | val loss | val efficiency / purity (cut 0.5) "
        "| best cut | val efficiency / purity (best cut) | step time [s] | minutes |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    elapsed, previous_step = 0.0, 0
    for row in rows:
        # Each row's epoch_wall_s is its last epoch's; spread that rate over the steps since
        # the previous row (every eval_every epochs) for the elapsed training time.
        step = int(row["step"])
        steps_in_epoch = step // (int(row["epoch"]) + 1)
        elapsed += float(row["epoch_wall_s"]) / steps_in_epoch * (step - previous_step)
        previous_step = step
        print(
            f"| {row['epoch']} | {row['step']} | {float(row['train_loss']):.4f} "
            f"| {float(row['val_loss']):.4f} | {float(row['val_efficiency']):.4f} / "
            f"{float(row['val_purity']):.4f} | {float(row['val_best_cut']):.3f} "
            f"| {float(row['val_best_cut_efficiency']):.4f} / "
            f"{float(row['val_best_cut_purity']):.4f} | {float(row['step_time_s']):.2f} "
            f"| {elapsed / 60:.1f} |"
        )
    print(
        "\n| events | cut | edge efficiency | edge purity | AUC | track efficiency "
        "| fake rate (no double-majority match) | impure rate (no majority particle) "
        "| duplicate rate |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, label in (
        ("test", "held-out simulated"),
        ("perfect", "held-out, perfect scores"),
        ("sample", "real TrackML sample"),
    ):
        if name not in results:
            continue
        r = results[name]
        edge, track = r.edge, r.track
        print(
            f"| {label} ({r.events}) | {r.cut:g} | {edge.efficiency:.4f} "
            f"| {edge.purity:.4f} | {edge.auc:.5f} | {track.efficiency:.4f} "
            f"| {track.fake_rate:.4f} | {track.impure_rate:.4f} "
            f"| {track.duplicate_rate:.4f} |"
        )
    if "perfect" in results:
        ratio = results["test"].track.efficiency / results["perfect"].track.efficiency
        print(f"\ntrack efficiency / perfect-score limit: {ratio:.4f}")
    labels = {"test": "held-out simulated", "perfect": "held-out, perfect scores",
              "sample": "real TrackML sample"}  # fmt: skip
    record_evaluations(
        record, "evaluations",
        "The pT > 1 GeV recipe's model on held-out simulated events, their truth scored (the "
        "construction's limit) and the real TrackML sample event",
        {labels[name]: result for name, result in results.items() if name in labels},
    )  # fmt: skip


if __name__ == "__main__":
    main()
