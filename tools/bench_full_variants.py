"""Where the hours should go: short runs of full-graph model variants, each scored on the same
held-out events along the way (issue 41, deliverable 1).

A variant is the shipped ``full-recipe`` config with ``--set`` overrides, trained from scratch
in halo mode on ``--ranks`` ranks for at most ``--minutes`` of wall time (then the ranks get
the trainer's stop signal, SIGUSR1: they finish the step, save a checkpoint and stop; run again,
the variant continues with ``--resume auto`` for another ``--minutes``), with a constant
learning rate after warm-up and a checkpoint every ``--every`` steps. Then every checkpoint
scores the held-out graphs in one process and the variant's learning curve is written
(``OUT/NAME/curve.json``): per checkpoint the step, the CPU hours to it (ranks x the wall time
of the sittings up to the checkpoint's writing) and acorn's two figures on pT > 1 GeV targets
(>= 3 hits): masked purity at 99 % target edge efficiency, target edge efficiency at 90 %
masked purity (:func:`partgnn.metrics.edge_metrics.target_operating_points`). ``--report``
prints the table of every variant under ``OUT`` and plots their curves
(``OUT/learning_curves.png``); with ``--record``, the table goes on the current-figures page::

    OMP_NUM_THREADS=1 .venv/bin/python tools/bench_full_variants.py --out runs/variants \\
        --shards data/full41/metis2-train-a --test-graphs data/full41/graphs-test.h5 \\
        --variant baseline --minutes 35
    .venv/bin/python tools/bench_full_variants.py --out runs/variants --report
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from _common import ToolParser, markdown_table, partgnn, record_table, recorded_sitting
from _paths import shipped_config

from partgnn.data.files.storage import GraphFile
from partgnn.metrics.edge_metrics import target_operating_points
from partgnn.metrics.evaluation import target_edges
from partgnn.train.inference import score_graphs
from partgnn.train.run_directory.checkpoints import step_of

CONFIG = shipped_config("full-recipe")
#: The held-out figures: masked purity read at this target efficiency, and the reverse.
EFFICIENCY, PURITY = 0.99, 0.90


def main() -> None:
    parser = ToolParser(__doc__, figures="recipe_full")
    parser.add_argument("--out", type=Path, required=True, help="one folder per variant")
    parser.add_argument("--variant", help="the variant's name (its folder under --out)")
    parser.add_argument("--shards", type=Path, help="training shards (partgnn partition)")
    parser.add_argument("--test-graphs", type=Path, help="held-out graphs to score")
    parser.add_argument("--minutes", type=float, default=35.0, help="wall time of this sitting")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--every", type=int, default=25, help="steps between checkpoints")
    parser.add_argument("--val-events", type=int, default=2, help="the trainer's, in the shards")
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    parser.add_argument("--report", action="store_true", help="table and plot of all variants")
    parser.add_argument("--no-train", action="store_true", help="score the checkpoints only")
    parser.tiny(minutes=1.0, every=1, val_events=1, variant="tiny")
    args = parser.parse_args()
    if args.tiny and not args.report:
        _tiny_data(args)
    if not args.report:
        if not (args.variant and args.shards and args.test_graphs):
            parser.error("a variant needs --variant, --shards and --test-graphs")
        folder = args.out / args.variant
        folder.mkdir(parents=True, exist_ok=True)
        if not args.no_train:
            _train(folder, args)
        _write_curve(folder, args.test_graphs, args.ranks)
    _report(args.out, args.record)


def _tiny_data(args) -> None:
    """A few tiny events, their graphs and 2-rank shards under ``OUT/data`` (``--tiny``)."""
    data = args.out / "data"
    for name, seed, first, events in (("train", 1, 0, 3), ("test", 2, 100, 1)):
        if not (data / f"graphs-{name}.h5").exists():
            partgnn("simulate", "--events", events, "--pileup", 2, "--seed", seed,
                    "--first-event-id", first, "--out", data / f"events-{name}.h5")  # fmt: skip
            partgnn("build-graphs", data / f"events-{name}.h5", "--out", data / f"graphs-{name}.h5")
    if not (data / "metis2" / "meta.json").exists():
        partgnn("partition", data / "graphs-train.h5", "--parts", 2, "--out", data / "metis2")
    args.shards, args.test_graphs, args.ranks = data / "metis2", data / "graphs-test.h5", 2
    args.overrides = [
        "model.hidden=8", "model.steps=2", "model.fused=false", "run.bf16=false",
        "optim.max_steps=2", "data.cache_mb=64", *args.overrides,
    ]  # fmt: skip


def _train(folder: Path, args) -> None:
    """One sitting of at most ``args.minutes``; its start and stop go to ``sittings.json``."""
    overrides = [
        "mode=halo", f"data.shards={args.shards}", f"data.val_events={args.val_events}",
        f"run.dir={folder / 'run'}", "run.progress=false", "run.init_from=null",
        "optim.schedule=constant", "optim.epochs=1000", f"run.checkpoint_every={args.every}",
        "run.keep_checkpoints=100000", *args.overrides,
    ]  # fmt: skip
    recorded_sitting(
        CONFIG, overrides, args.ranks, run_dir=folder / "run", sittings=folder / "sittings.json",
        note=args.overrides, log=folder / "train.log", minutes=args.minutes,
    )  # fmt: skip


def _write_curve(folder: Path, test_graphs: Path, ranks: int) -> None:
    """Scores every checkpoint of the variant's run on ``test_graphs`` -> ``curve.json``."""
    sittings = json.loads((folder / "sittings.json").read_text())
    curve_path = folder / "curve.json"
    curve = json.loads(curve_path.read_text()) if curve_path.exists() else []
    done = {point["step"] for point in curve}
    with GraphFile(test_graphs) as graphs:
        truth = {
            int(g.event_id): (g.y.numpy(), target_edges(g.edge_index.numpy(), g.y.numpy(),
                                                        g.particle_id.numpy(),
                                                        g.particle_pt.numpy(), 1.0))
            for g in graphs
        }  # fmt: skip
    for path in sorted((folder / "run" / "checkpoints").glob("step-*.pt"), key=step_of):
        step = step_of(path)
        if step in done:
            continue
        written = path.stat().st_mtime
        wall = sum(max(0.0, min(s["stop"], written) - s["start"]) for s in sittings)
        scores, y, target = [], [], []
        with torch.inference_mode():
            for event_id, event_scores in score_graphs(path, test_graphs, torch.device("cpu")):
                scores.append(event_scores)
                y.append(truth[event_id][0])
                target.append(truth[event_id][1])
        points = target_operating_points(
            np.concatenate(scores), np.concatenate(y), np.concatenate(target),
            efficiency=EFFICIENCY, purity=PURITY,
        )  # fmt: skip
        curve.append({"step": step, "cpu_hours": ranks * wall / 3600, **points})
        print(f"{folder.name} step {step}: {points}", file=sys.stderr, flush=True)
    curve.sort(key=lambda point: point["step"])
    curve_path.write_text(json.dumps(curve, indent=1) + "\n")


def _report(out: Path, record: Path | None = None) -> None:
    """The table of every variant's last point and the plot of their curves (``record``: the
    last points on the current-figures page)."""
    variants = {p.parent.name: json.loads(p.read_text()) for p in sorted(out.glob("*/curve.json"))}
    variants = {name: curve for name, curve in variants.items() if curve}
    rows = []
    for name, curve in variants.items():
        last = curve[-1]
        best = max(curve, key=lambda point: point["masked_purity_at_efficiency"])
        rows.append((
            name, last["step"], f"{last['cpu_hours']:.2f}",
            f"{last['masked_purity_at_efficiency']:.3f}", f"{last['efficiency_at_purity']:.3f}",
            f"{best['masked_purity_at_efficiency']:.3f} (step {best['step']})",
        ))  # fmt: skip
    print(markdown_table(
        ("variant", "steps", "CPU hours", f"masked purity at {EFFICIENCY:.0%} target eff.",
         f"target eff. at {PURITY:.0%} masked purity", "best masked purity"), rows,
    ))  # fmt: skip
    record_table(
        record, "variants",
        f"Variants of the full recipe trained from scratch (acorn's definitions, on the held-out "
        f"curve events): masked purity at {EFFICIENCY:.0%} target edge efficiency and target "
        f"edge efficiency at {PURITY:.0%} masked purity, at each variant's last step",
        [{"variant": name, **curve[-1]} for name, curve in variants.items()],
        row_label="{variant} ({step} steps, {cpu_hours:.2f} CPU hours)",
        column_label="masked purity / target efficiency",
        cell="{masked_purity_at_efficiency:.3f} / {efficiency_at_purity:.3f}",
    )  # fmt: skip
    if not variants:
        return
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(1, 2, figsize=(11, 4.2))
    for name, curve in variants.items():
        hours = [point["cpu_hours"] for point in curve]
        axes[0].plot(
            hours, [p["masked_purity_at_efficiency"] for p in curve], marker=".", label=name
        )
        axes[1].plot(hours, [p["efficiency_at_purity"] for p in curve], marker=".", label=name)
    axes[0].set_ylabel(f"masked purity at {EFFICIENCY:.0%} target edge efficiency")
    axes[1].set_ylabel(f"target edge efficiency at {PURITY:.0%} masked purity")
    for axis in axes:
        axis.set_xlabel("CPU hours (ranks x wall time)")
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(out / "learning_curves.png", dpi=110)
    print(f"plot: {out / 'learning_curves.png'}")


if __name__ == "__main__":
    main()
