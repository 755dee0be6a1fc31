"""Do cluster features help? The full-graph recipe trained twice at equal steps, on the same
simulated events, once on partgnn's own node inputs (r, phi, z, eta) and once with the hits'
cluster features added (acorn's TrackML list: cell_count, cell_val, leta, lphi, lx, ly, lz,
geta, gphi; issue 70); each scored on simulated held-out events and on the real TrackML
sample, at the cut each chose on its validation events::

    OMP_NUM_THREADS=1 .venv/bin/python tools/bench_cluster_features.py --out data/cells-ab \\
        --steps 800 --minutes 40

Each arm is one ``tools/bench_full_recipe.py`` run (its folder ``OUT/plain`` or ``OUT/cells``;
the second arm's data are the first's files, linked), trained in sittings of at most
``--minutes`` with ``--resume auto``: run the same command again to continue, until both arms
reach ``--steps``. The real sample is imported with its cells, its graph built with the same
map, scored by each arm's last checkpoint and evaluated at that arm's cut. The table compares
target edge efficiency at masked purity (acorn's definitions), AUC and ATLAS track efficiency.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from _common import ToolParser, markdown_table, partgnn, record_figures
from _paths import sample_dir

from partgnn.metrics.evaluation_results import EvaluationResults
from partgnn.resources import pretrained_dir
from partgnn.train.run_directory.saved_model import SavedModel

#: The node inputs of each arm (names and scales, as acorn's TrackML example gives them; the
#: recipe standardises its inputs after the scales).
ARMS: dict[str, list[object]] = {
    "plain": [{"r": 1000.0}, {"phi": 3.141592653589793}, {"z": 1000.0}, {"eta": 1.0}],
    "cells": [{"r": 1000.0}, {"phi": 3.141592653589793}, {"z": 1000.0}, {"eta": 1.0},
              "cell_count", "cell_val", "leta", "lphi", {"lx": 0.1}, "ly", {"lz": 0.1}, "geta",
              {"gphi": 3.14}],
}  # fmt: skip
#: The files the second arm shares with the first.
SHARED = ("events-train.h5", "graphs-train.h5", "events-val.h5", "graphs-val.h5",
          "events-test.h5", "graphs-test.h5")  # fmt: skip
TOOLS = Path(__file__).resolve().parent


def main() -> None:
    parser = ToolParser(__doc__, figures="recipe_full")
    parser.add_argument("--out", type=Path, default=Path("bench-cluster-features"))
    parser.add_argument("--steps", type=int, default=800, help="training steps of each arm")
    parser.add_argument("--minutes", type=float, default=None, help="wall time of each sitting")
    parser.add_argument("--train-events", type=int, default=60)
    parser.add_argument("--cut-events", type=int, default=5)
    parser.add_argument("--test-events", type=int, default=10)
    parser.add_argument("--pileup", type=float, default=200.0)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--map", type=Path, default=pretrained_dir() / "trackml-full.map.npz")
    parser.add_argument("--tables-only", action="store_true")
    parser.tiny(
        steps=2, train_events=3, cut_events=1, test_events=1, pileup=3.0, ranks=1, workers=1
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.tables_only:
        for arm in ARMS:
            folder = args.out / arm
            if _steps(folder) < args.steps or not (folder / "scored-step.json").exists():
                _run_arm(args, arm)
            if _steps(args.out / arm) >= args.steps:
                _score_real_sample(args, arm)
    rows = _print_table(args)
    record_figures(args.record, _figures(rows, args))


def _figures(rows: list[list], args) -> list[tuple[str, str]]:
    """One figure per kind of events: each arm's target edge efficiency, masked purity and ATLAS
    track efficiency."""
    figures = []
    for label in ("simulated held-out", "real TrackML sample"):
        found = {row[0]: row for row in rows if row[1] == label}
        if set(found) != set(ARMS):
            continue
        shown = "; ".join(
            f"{arm}: {row[4]} / {row[5]} (ATLAS track efficiency {row[7]}, AUC {row[6]}, cut "
            f"{row[3]})"
            for arm, row in found.items()
        )
        events = (f"{args.test_events} simulated held-out events" if label.startswith("sim")
                  else "the real TrackML sample event")  # fmt: skip
        figures.append((
            f"cluster features or not, at equal steps ({args.steps}, pile-up {args.pileup:g}, "
            f"{args.train_events} training events, halo on {args.ranks} ranks): target edge "
            f"efficiency / masked purity on {events}, at each arm's cut (1 % impure tracks on "
            "its validation events)",
            shown,
        ))  # fmt: skip
    return figures


def _run_arm(args, arm: str) -> None:
    """One sitting of an arm (and, once it has all its steps, its scoring)."""
    folder = args.out / arm
    folder.mkdir(exist_ok=True)
    if arm != "plain":
        for name in SHARED:
            source, target = args.out / "plain" / name, folder / name
            if source.exists() and not target.exists():
                os.link(source, target)
        for shards in (args.out / "plain").glob("metis*"):
            target = folder / shards.name
            if not target.exists():
                target.symlink_to(shards.resolve())
    overrides = [
        f"optim.max_steps={args.steps}", "optim.schedule=cosine",
        f"data.node_features={json.dumps(ARMS[arm])}",
    ]  # fmt: skip
    if args.tiny:
        overrides += ["optim.epochs=1", "model.fused=false", "run.bf16=false", "data.cache_mb=64"]
    command = [
        sys.executable, str(TOOLS / "bench_full_recipe.py"), "--out", str(folder),
        "--map", str(args.map), "--train-events", str(args.train_events), "--val-events", "2",
        "--cut-events", str(args.cut_events), "--test-events", str(args.test_events),
        "--pileup", f"{args.pileup:g}", "--ranks", str(args.ranks), "--workers",
        str(args.workers), "--impure-rate", "0.01", "--track-building", "junction",
        *(["--minutes", f"{args.minutes:g}"] if args.minutes else []),
        *[item for override in overrides for item in ("--set", override)],
    ]  # fmt: skip
    if args.minutes and _steps(folder) < args.steps:
        command += ["--no-score"]  # a sitting may stop early: score once all steps are done
    print(f"$ {' '.join(command[1:])}", file=sys.stderr, flush=True)
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"bench_cluster_features: the {arm} arm failed (exit {done.returncode})")
    if _steps(folder) >= args.steps and not (folder / "scored-step.json").exists():
        _run_arm(args, arm)  # the sitting that reached the last step: now score it


def _steps(folder: Path) -> int:
    last = folder / "run" / "checkpoints" / "last.pt"
    return SavedModel.read(last).step if last.exists() else 0


def _score_real_sample(args, arm: str) -> None:
    """The real sample's graph (with its cells) scored by the arm and evaluated at its cut."""
    sample = sample_dir()
    if sample is None:
        print("bench_cluster_features: no real TrackML sample here", file=sys.stderr)
        return
    real = args.out / "real"
    real.mkdir(exist_ok=True)
    if not (real / "graphs.h5").exists():
        partgnn("import-trackml", sample, "--out", real / "events.h5", "--overwrite")
        partgnn("build-graphs", real / "events.h5", "--method", "module-map", "--map", args.map,
                "--out", real / "graphs.h5", "--overwrite")  # fmt: skip
    folder = args.out / arm
    cut = EvaluationResults.read(folder / "evaluation-val.json").cut
    scores = real / f"scores-{arm}.h5"
    partgnn("infer", "--checkpoint", folder / "run" / "checkpoints" / "last.pt", "--graphs",
            real / "graphs.h5", "--out", scores, "--device", "cpu", "--overwrite")  # fmt: skip
    partgnn("evaluate", scores, "--graphs", real / "graphs.h5", "--events", real / "events.h5",
            "--cut", repr(cut), "--track-building", "junction", "--out",
            real / f"evaluation-{arm}.json", "--overwrite")  # fmt: skip


def _print_table(args) -> list[list]:
    rows = []
    for arm in ARMS:
        folder = args.out / arm
        for label, path in (
            ("simulated held-out", folder / "evaluation-test.json"),
            ("real TrackML sample", args.out / "real" / f"evaluation-{arm}.json"),
        ):
            if not path.exists():
                continue
            result = EvaluationResults.read(path)
            edge, track = result.edge, result.track
            rows.append([
                arm, label, _steps(folder), f"{result.cut:.4g}",
                f"{edge.target_efficiency:.4f}", f"{edge.masked_purity:.4f}",
                f"{edge.auc:.5f}", f"{track.efficiency_atlas:.4f}",
            ])  # fmt: skip
    print(f"pile-up {args.pileup:g}, {args.train_events} training events, {args.steps} steps "
          "per arm; cut: the lowest with at most 1 % impure tracks on the arm's validation "
          "events (junction track building)\n")  # fmt: skip
    print(markdown_table(
        ["inputs", "events", "steps", "cut", "target edge efficiency", "masked purity", "AUC",
         "ATLAS track efficiency"], rows,
    ))  # fmt: skip
    (args.out / "comparison.json").write_text(json.dumps({"rows": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main()
