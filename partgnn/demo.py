"""``make demo``: the whole pipeline on a small default dataset, on the CPU.

Runs the same commands a user would: simulate events, build pT > 1 GeV graphs, partition them
for 2 ranks (METIS and phi sectors), train the edge classifier in modes full (one process), halo
(2 processes under torchrun, exact) and naive (2 independent sectors), and print a comparison of
the three runs. Also imports the real TrackML sample event when it is beside the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from partgnn.cli.main import main as partgnn_main
from partgnn.data.paths import config_dir, trackml_sample_dir


def run(out: Path, *, events: int, pileup: float, seed: int, epochs: int) -> int:
    """Runs the demo into ``out``; returns the first non-zero exit code, else 0."""
    out.mkdir(parents=True, exist_ok=True)
    graphs = out / "graphs-ptmin1.h5"
    data_steps = [
        [
            "simulate",
            "--events",
            str(events),
            "--pileup",
            f"{pileup:g}",
            "--seed",
            str(seed),
            "--out",
            str(out / "events.h5"),
        ],
        ["build-graphs", str(out / "events.h5"), "--out", str(graphs), "--pt-min", "1.0"],
        [
            "partition",
            str(graphs),
            "--parts",
            "2",
            "--method",
            "metis",
            "--out",
            str(out / "shards-metis2"),
        ],
        [
            "partition",
            str(graphs),
            "--parts",
            "2",
            "--method",
            "phi",
            "--out",
            str(out / "shards-phi2"),
        ],
    ]
    sample = trackml_sample_dir()
    if (sample / "event000000001-hits.csv.gz").exists():
        data_steps += [
            ["import-trackml", str(sample), "--out", str(out / "trackml-sample.h5")],
            [
                "build-graphs",
                str(out / "trackml-sample.h5"),
                "--out",
                str(out / "trackml-sample-graphs.h5"),
                "--pt-min",
                "1.0",
            ],
        ]
    for step in data_steps:
        _announce(["partgnn", *step])
        if code := partgnn_main(step):
            return code
    config = config_dir() / "demo.yaml"
    common = [
        f"data.graphs={graphs}",
        f"data.shards={out / 'shards-phi2'}",
        f"data.boundary_shards={out / 'shards-phi2'}",
        f"optim.epochs={epochs}",
    ]
    runs = {
        "full": ["partgnn"],
        "halo": ["torchrun", "--standalone", "--nproc-per-node", "2"],
        "naive": ["torchrun", "--standalone", "--nproc-per-node", "2"],
    }
    bin_dir = Path(sys.executable).parent
    for mode, launcher in runs.items():
        overrides = [*common, f"mode={mode}", f"run.dir={out / 'runs' / mode}"]
        arguments = ["train", "--config", str(config)]
        for override in overrides:
            arguments += ["--set", override]
        if launcher[0] == "torchrun":
            command = [str(bin_dir / "torchrun"), *launcher[1:], "-m", "partgnn", *arguments]
        else:
            command = [str(bin_dir / "partgnn"), *arguments]
        _announce([Path(command[0]).name, *command[1:]])
        env = dict(os.environ, OMP_NUM_THREADS="1")
        if code := subprocess.run(command, env=env, check=False).returncode:
            return code
    print()
    print(comparison_table({mode: out / "runs" / mode for mode in runs}))
    print(f"\ndemo outputs in {out}/ (runs in {out / 'runs'}/, TensorBoard logs in runs/*/tb)")
    return 0


def comparison_table(run_dirs: dict[str, Path]) -> str:
    """Markdown table of the final validation metrics and costs of several runs."""
    header = (
        "| run | ranks | val loss | efficiency | purity | boundary eff. | boundary purity "
        "| step ms | peak MB per rank | MB exchanged |\n|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [header]
    for name, run_dir in run_dirs.items():
        summary = json.loads((run_dir / "summary.json").read_text())
        final = summary["final"] or {}
        memory = " / ".join(f"{m:.0f}" for m in final.get("peak_memory_mb_per_rank", []))
        lines.append(
            f"| {name} | {summary['world_size']} | {final.get('val_loss', float('nan')):.4f} "
            f"| {final.get('val_efficiency', float('nan')):.4f} "
            f"| {final.get('val_purity', float('nan')):.4f} "
            f"| {final.get('val_boundary_efficiency', float('nan')):.4f} "
            f"| {final.get('val_boundary_purity', float('nan')):.4f} "
            f"| {1e3 * final.get('step_time_s', float('nan')):.1f} | {memory} "
            f"| {summary['communication']['bytes_sent'] / 1e6:.2f} |"
        )
    return "\n".join(lines)


def _announce(command: list[str]) -> None:
    print(f"\n$ {' '.join(command)}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m partgnn.demo", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("demo-output"))
    parser.add_argument("--events", type=int, default=10)
    parser.add_argument("--pileup", type=float, default=40.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args(argv)
    return run(args.out, events=args.events, pileup=args.pileup, seed=args.seed, epochs=args.epochs)


if __name__ == "__main__":
    sys.exit(main())
