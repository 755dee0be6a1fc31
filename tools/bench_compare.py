"""What halo exchange buys over naive sectorisation, after the same training budget.

Simulates pile-up events, builds pT > 1 GeV graphs, partitions them in phi sectors for each P,
trains the same Interaction Network in modes full (1 process), halo (P ranks) and naive (P
sectors) with the same number of optimizer steps, scores the validation events (halo runs with
the exchange, naive runs sector by sector), and evaluates edge and track metrics; then scores the
real TrackML sample event (pT > 1 GeV graph, same phi sectors) with the same models. Prints
markdown tables for docs/BENCHMARKS.md:

    .venv/bin/python tools/bench_compare.py --parts 2 4 8 --events 12 --pileup 200
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--parts", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--train-events", type=int, default=10)
    parser.add_argument("--test-events", type=int, default=3)
    parser.add_argument("--pileup", type=float, default=200.0)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("bench-compare"))
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    sample = Path(__file__).resolve().parents[2] / "shared" / "data" / "trackml-sample"
    datasets = {
        "train": ("simulate", "--events", str(args.train_events), "--seed", "5"),
        "test": (
            "simulate",
            "--events",
            str(args.test_events),
            "--seed",
            "6",
            "--first-event-id",
            "1000",
        ),
        "sample": ("import-trackml", str(sample)),
    }
    for name, command in datasets.items():
        if not (out / f"graphs-{name}.h5").exists():
            extra = ("--pileup", f"{args.pileup:g}") if command[0] == "simulate" else ()
            _partgnn(*command, *extra, "--out", str(out / f"events-{name}.h5"))
            _partgnn(
                "build-graphs",
                str(out / f"events-{name}.h5"),
                "--out",
                str(out / f"graphs-{name}.h5"),
                "--pt-min",
                "1.0",
            )
        for n_parts in args.parts:
            shards = out / f"phi{n_parts}-{name}"
            if not shards.exists():
                _partgnn(
                    "partition",
                    str(out / f"graphs-{name}.h5"),
                    "--parts",
                    str(n_parts),
                    "--method",
                    "phi",
                    "--out",
                    str(shards),
                )
    config = Path(__file__).resolve().parents[1] / "configs" / "full.yaml"
    runs = [("full", 1)] + [(mode, p) for p in args.parts for mode in ("halo", "naive")]
    tables: dict[str, list] = {"test": [], "sample": []}
    for mode, n_parts in runs:
        run_dir = out / "runs" / f"{mode}-{n_parts}"
        overrides = [
            f"mode={mode}",
            f"data.graphs={out / 'graphs-train.h5'}",
            f"data.shards={out / f'phi{max(n_parts, args.parts[0])}-train'}",
            "data.val_events=0",
            "data.boundary_shards=null",
            f"model.hidden={args.hidden}",
            f"model.steps={args.steps}",
            f"optim.epochs={args.epochs}",
            "optim.lr=0.003",
            "optim.warmup_steps=5",
            f"run.dir={run_dir}",
            "run.device=cpu",
            "run.progress=false",
            "run.checkpoint_every=100000",
            "run.timeout_s=1800",
        ]
        if not (run_dir / "summary.json").exists():
            _launch(
                n_parts,
                "train",
                "--config",
                str(config),
                *[a for o in overrides for a in ("--set", o)],
            )
        checkpoint = run_dir / "checkpoints" / "last.pt"
        for name, rows in tables.items():
            # Boundary edges (and the sectors naive runs score) are those of P sectors; the
            # full run is shown against the smallest P.
            shards = out / f"phi{max(n_parts, args.parts[0])}-{name}"
            scores = run_dir / f"scores-{name}.h5"
            if mode == "full":
                _partgnn(
                    "infer",
                    "--checkpoint",
                    str(checkpoint),
                    "--graphs",
                    str(out / f"graphs-{name}.h5"),
                    "--out",
                    str(scores),
                    "--device",
                    "cpu",
                )
            else:
                extra = ["--naive"] if mode == "naive" else []
                _launch(
                    n_parts,
                    "infer",
                    "--checkpoint",
                    str(checkpoint),
                    "--shards",
                    str(shards),
                    "--out",
                    str(scores),
                    "--device",
                    "cpu",
                    *extra,
                )
            evaluation = run_dir / f"evaluation-{name}.json"
            _partgnn(
                "evaluate",
                str(scores),
                "--graphs",
                str(out / f"graphs-{name}.h5"),
                "--events",
                str(out / f"events-{name}.h5"),
                "--shards",
                str(shards),
                "--out",
                str(evaluation),
            )
            rows.append((mode, n_parts, json.loads(evaluation.read_text())))
    print(
        f"\n### Simulated pile-up {args.pileup:g}, pT > 1 GeV graphs, phi sectors: trained on "
        f"{args.train_events} events x {args.epochs} epochs, scored on {args.test_events} "
        "other events\n"
    )
    _table(tables["test"])
    print("\n### Real TrackML sample event (pT > 1 GeV graph), same models, phi sectors\n")
    _table(tables["sample"])


def _table(rows) -> None:
    print(
        "| mode | P | edge eff. | purity | AUC | boundary eff. | interior eff. | target eff. "
        "| track eff. | fake rate | TrackML score |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for mode, n_parts, m in rows:
        e, t = m["edge"], m["track"]
        score = t.get("trackml_score")
        print(
            f"| {mode} | {n_parts} | {e['efficiency']:.4f} | {e['purity']:.4f} | {e['auc']:.4f} "
            f"| {e['boundary_efficiency']:.4f} | {e['interior_efficiency']:.4f} "
            f"| {e['target_efficiency']:.4f} | {t['efficiency']:.4f} | {t['fake_rate']:.4f} "
            f"| {'n/a' if score is None else f'{score:.4f}'} |",
            flush=True,
        )


def _partgnn(*args: str) -> None:
    subprocess.run(
        [str(BIN / "partgnn"), *args],
        check=True,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _launch(n_parts: int, *args: str) -> None:
    if n_parts == 1:
        _partgnn(*args)
        return
    subprocess.run(
        [
            str(BIN / "torchrun"),
            "--standalone",
            "--nproc-per-node",
            str(n_parts),
            "-m",
            "partgnn",
            *args,
        ],
        check=True,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _env() -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS="1")


if __name__ == "__main__":
    main()
