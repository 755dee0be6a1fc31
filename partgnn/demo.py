"""``make demo``: the whole pipeline on a small default dataset, on the CPU.

Runs the same commands a user would: simulate events, build pT > 1 GeV graphs, partition them
into 4 phi sectors (plain, and extended by steps + 1 hops for overlapping sectors), train the
edge classifier as the full graph (one process) and with the three strategies on 4 ranks under
torchrun: halo exchange (exact), naive sectors (cut edges lost) and overlapping sectors (exact on
owned edges without communication, at the price of replicated work); score the validation
events with each model (halo with the exchange, naive and overlap sector by sector), evaluate
edge and track metrics (split by whether a particle's hits span several sectors), and write the
comparison report. When the real TrackML sample event is at hand (``--trackml-sample DIR`` or
``$PARTGNN_TRACKML_SAMPLE``; ``make demo`` names the repository's copy,
``tests/fixtures/trackml-sample``), imports it and scores it with the shipped trained models,
each on the graph its card says (``partgnn pretrained NAME --evaluate``), beside their cards'
simulated figures.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from partgnn.cli.main import main as partgnn_main
from partgnn.data.files.storage import GraphFile
from partgnn.metrics.report import EVALUATION_NAME, findings, load_run, summary_table
from partgnn.resources import trackml_sample_dir
from partgnn.train.config.config_file import load_config

#: Sectors of the demo: at 4 phi sectors many pT > 1 GeV tracks cross a boundary.
N_SECTORS = 4
#: The shipped models the demo scores the real sample event with.
SAMPLE_MODELS = ("trackml-full", "trackml-pt1")


def run(
    out: Path,
    *,
    events: int,
    pileup: float,
    seed: int,
    epochs: int,
    trackml_sample: Path | None = None,
) -> int:
    """Runs the demo into ``out``; returns the first non-zero exit code, else 0.

    ``trackml_sample`` (default ``$PARTGNN_TRACKML_SAMPLE``) is the real sample event's folder;
    without one the demo skips it.
    """
    out.mkdir(parents=True, exist_ok=True)
    config = load_config("demo")
    # Overlapping sectors of steps + 1 hops score their owned edges exactly as the full graph.
    margin = config.model.steps + 1
    graphs = out / "graphs-ptmin1.h5"
    sectors = out / f"shards-phi{N_SECTORS}"
    overlapping = out / f"shards-phi{N_SECTORS}-margin{margin}"
    partition = ["partition", str(graphs), "--parts", str(N_SECTORS), "--method", "phi"]
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
        [*partition, "--out", str(sectors)],
        [*partition, "--margin", str(margin), "--out", str(overlapping)],
    ]
    sample = trackml_sample_dir(trackml_sample)
    if sample is not None:
        data_steps.append(["import-trackml", str(sample), "--out", str(out / "trackml-sample.h5")])
    for step in data_steps:
        _announce(["partgnn", *step])
        if code := partgnn_main(step):
            return code
    common = [
        f"data.graphs={graphs}",
        f"data.boundary_shards={sectors}",
        f"optim.epochs={epochs}",
    ]
    # The validation events of the runs: the last ones of the graphs file (configs/demo.yaml).
    with GraphFile(graphs) as graph_file:
        validation_ids = graph_file.event_ids[-config.data.val_events :]
    # name: (mode, ranks, shards it trains on and is scored on)
    runs = {
        "full": ("full", 1, sectors),
        "halo": ("halo", N_SECTORS, sectors),
        "naive": ("naive", N_SECTORS, sectors),
        f"overlapping-k{margin}": ("overlapping", N_SECTORS, overlapping),
    }
    for name, (mode, n_ranks, shards) in runs.items():
        run_dir = out / "runs" / name
        overrides = [*common, f"data.shards={shards}", f"mode={mode}", f"run.dir={run_dir}"]
        arguments = ["train", "--config", "demo", "--replace"]  # the demo makes its runs anew
        for override in overrides:
            arguments += ["--set", override]
        if code := _launch(n_ranks, arguments):
            return code
        scores = run_dir / "scores.h5"
        # Each run is scored as it trained: full on whole graphs, the others on their shards.
        source = ["--graphs", str(graphs)] if n_ranks == 1 else ["--shards", str(shards)]
        infer = [
            "infer",
            "--checkpoint",
            str(run_dir / "checkpoints" / "last.pt"),
            *source,
            "--out",
            str(scores),
            "--device",
            "cpu",
            "--mode",
            mode,
        ]
        if code := _launch(n_ranks, infer):
            return code
        evaluate = [
            "evaluate",
            str(scores),
            "--graphs",
            str(graphs),
            "--events",
            str(out / "events.h5"),
            "--shards",
            str(sectors),
            "--event-ids",
            *map(str, validation_ids),
            "--out",
            str(run_dir / EVALUATION_NAME),
            "--plots",
            str(out / "plots" / name),
        ]
        _announce(["partgnn", *evaluate])
        if code := partgnn_main(evaluate):
            return code
    compare = [
        "compare",
        *(str(out / "runs" / name) for name in runs),
        "--names",
        *runs,
        "--out",
        str(out / "report"),
    ]
    _announce(["partgnn", *compare])
    if code := partgnn_main(compare):
        return code
    records = [load_run(out / "runs" / name, name=name) for name in runs]
    print("\n" + "\n".join(summary_table(records)))
    print("\n" + "\n".join(findings(records)))
    print(
        f"\nEfficiency against pT and eta, the impure rate against eta and the edge efficiency "
        f"in r-z of each run's validation events: {out / 'plots'}/NAME/*.png"
    )
    if sample is not None and (code := _score_real_sample(out)):
        return code
    cores = os.cpu_count() or 1
    if cores < N_SECTORS:
        print(
            f"\nNote: the {N_SECTORS}-rank runs shared {cores} CPU cores, so their step times "
            "include waiting for a core; on one device per rank the exchange is what halo adds."
        )
    print(
        f"\ncomparison report: {out / 'report' / 'report.md'} (plots beside it); runs, "
        f"TensorBoard logs and checkpoints in {out / 'runs'}/"
    )
    return 0


def _score_real_sample(out: Path) -> int:
    """The shipped models on the real TrackML sample event: each builds its graph the way its
    card says (trackml-full: every hit, its module map; trackml-pt1: pT > 1 GeV, geometric),
    scores it, and prints its figures beside the card's simulated held-out ones."""
    print("\nThe shipped trained models on the real TrackML sample event (1 event, ~5 % of a "
          "pile-up-200 event's particles):")  # fmt: skip
    for name in SAMPLE_MODELS:
        command = ["pretrained", name, "--evaluate", str(out / "trackml-sample.h5"), "--work",
                   str(out / "trackml-sample" / name)]  # fmt: skip
        _announce(["partgnn", *command])
        if code := partgnn_main(command):
            return code
    return 0


def _launch(n_ranks: int, arguments: list[str]) -> int:
    """Runs ``partgnn ARGS`` in one process, or under torchrun on ``n_ranks`` processes."""
    bin_dir = Path(sys.executable).parent
    if n_ranks == 1:
        command = [str(bin_dir / "partgnn"), *arguments]
    else:
        command = [
            str(bin_dir / "torchrun"),
            "--standalone",
            "--nproc-per-node",
            str(n_ranks),
            "-m",
            "partgnn",
            *arguments,
        ]
    _announce([Path(command[0]).name, *command[1:]])
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(command, env=env, check=False).returncode


def _announce(command: list[str]) -> None:
    print(f"\n$ {' '.join(command)}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m partgnn.demo", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("demo-output"))
    parser.add_argument("--events", type=int, default=24)
    parser.add_argument("--pileup", type=float, default=40.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument(
        "--trackml-sample", type=Path, default=None, help="folder of the real TrackML sample event"
    )
    args = parser.parse_args(argv)
    return run(
        args.out,
        events=args.events,
        pileup=args.pileup,
        seed=args.seed,
        epochs=args.epochs,
        trackml_sample=args.trackml_sample,
    )


if __name__ == "__main__":
    sys.exit(main())
