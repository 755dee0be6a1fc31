"""Benchmark of training on one pile-up-200 event graph: per-rank peak memory and step time.

Simulates one pile-up-200 event, builds its graph (``--pt-min``, default no cut: ~1e5 nodes and
~1.1e6 edges), partitions it with METIS for each P, and trains a few steps with ``partgnn train``
(mode full for P = 1, halo under torchrun for P > 1; one thread per rank), with and without
activation recomputation (``--recompute``: ``model.recompute``). Before each run ``partgnn plan``
predicts every rank's peak; the rows show the prediction and its error against the measured peak
RSS. ``--model-of CONFIG`` takes the model, the loss and the precision (``run.dtype``, ``run.bf16``)
of a run config (a shipped one's name or a path) instead of ``--hidden``/``--steps``. Prints
markdown rows; ``--record`` puts the peak per rank, the plan's error and the step time of each P
and recomputation setting on the current-figures page:

    .venv/bin/python tools/bench_train.py --parts 1 2 4 --hidden 32 --steps 4 --train-steps 3
    .venv/bin/python tools/bench_train.py --parts 1 2 4 --model-of recipe --recompute on
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

import yaml
from _common import ToolParser, partgnn_launcher, planned_mib, record_table


def main() -> None:
    parser = ToolParser(__doc__, figures="training_memory")
    parser.add_argument("--parts", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--pileup", type=float, default=200.0)
    parser.add_argument("--pt-min", type=float, default=0.0)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--steps", type=int, default=4, help="message-passing steps")
    parser.add_argument("--train-steps", type=int, default=3, help="optimizer steps per run")
    parser.add_argument(
        "--recompute", nargs="+", choices=["off", "on"], default=["off", "on"],
        help="activation recomputation (model.recompute) off and/or on",
    )  # fmt: skip
    parser.renamed("--checkpointing", "--recompute")
    parser.add_argument(
        "--model-of", default=None, metavar="CONFIG",
        help="take model, loss and precision from this run config (name or path)",
    )  # fmt: skip
    parser.tiny(parts=[1], pileup=3.0, hidden=8, steps=1, train_steps=1, recompute=["on"])
    args = parser.parse_args()
    if args.model_of:
        base = _model_of(args.model_of)
        model = f"the model of {args.model_of} ({base['model']}, run {base['run']})"
    else:
        base = {"model": {"hidden": args.hidden, "steps": args.steps}, "loss": {}, "run": {}}
        model = f"Interaction Network H = {args.hidden}, {args.steps} steps, float32"

    from _event_graph import write_event_graph

    from partgnn.partition.event_split import PartitionOptions
    from partgnn.partition.shard_writer import write_shards

    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        graphs = folder / "graphs.h5"
        n_nodes, n_edges = write_event_graph(graphs, pileup=args.pileup, pt_min=args.pt_min)
        print(
            f"event graph: {n_nodes:,} nodes, {n_edges:,} edges; {model}; "
            f"{os.cpu_count()} cores, one thread per rank\n"
        )
        print(
            "| P | recompute | peak RSS per rank (MiB) | max rank (MiB) "
            "| planned per rank (MiB) | plan error per rank | step time (s) "
            "| parallel efficiency t1 / (P tP) | MB exchanged per step |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        step_time_1 = {}
        measurements = []
        for recompute in args.recompute:
            for n_parts in args.parts:
                shards = folder / f"metis{n_parts}"
                if not shards.exists():
                    write_shards(graphs, shards, PartitionOptions(n_parts=n_parts), progress=False)
                run_dir = folder / f"run-{n_parts}-{recompute}"
                config = folder / f"{run_dir.name}.yaml"
                config.write_text(
                    yaml.safe_dump(
                        {
                            "mode": "full" if n_parts == 1 else "halo",
                            "data": {"graphs": str(graphs), "shards": str(shards), "val_events": 0},
                            "model": {
                                **base["model"],
                                "recompute": recompute == "on",
                            },
                            "loss": base["loss"],
                            "optim": {"epochs": args.train_steps, "warmup_steps": 1},
                            "run": {
                                **base["run"],
                                "dir": str(run_dir),
                                "device": "cpu",
                                "progress": False,
                                "tensorboard": False,
                                "timeout_s": 3600,
                                "checkpoint_every": 1000,
                            },
                        }
                    )
                )
                launcher = partgnn_launcher(n_parts)
                env = dict(os.environ, OMP_NUM_THREADS="1")
                planned = planned_mib(config)
                started = time.perf_counter()
                done = subprocess.run(
                    [*launcher, "train", "--config", str(config)],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if done.returncode:
                    print(
                        f"| {n_parts} | {recompute} | failed (exit {done.returncode}, "
                        f"{time.perf_counter() - started:.0f} s): "
                        f"{(done.stderr.strip().splitlines() or [''])[-1][:120]} | | | | | | |",
                        flush=True,
                    )
                    continue
                from partgnn.metrics.run_summary import RunSummary

                summary = RunSummary.read(run_dir)
                final = summary.require_final()
                memory = final.peak_memory_mb_per_rank
                step_time = final.step_time_s
                if n_parts == 1:
                    step_time_1[recompute] = step_time
                efficiency = (
                    step_time_1[recompute] / (n_parts * step_time)
                    if recompute in step_time_1
                    else float("nan")
                )
                exchanged = summary.bytes_sent / summary.steps / 1e6
                errors = [100 * (p / m - 1) for p, m in zip(planned, memory, strict=True)]
                print(
                    f"| {n_parts} | {recompute} | {' / '.join(f'{m:.0f}' for m in memory)} "
                    f"| {max(memory):.0f} | {' / '.join(f'{p:.0f}' for p in planned)} "
                    f"| {' / '.join(f'{e:+.1f} %' for e in errors)} | {step_time:.2f} "
                    f"| {efficiency:.2f} | {exchanged:.1f} |",
                    flush=True,
                )
                measurements.append({
                    "parts": n_parts, "recompute": recompute, "peak_mib_max": max(memory),
                    "plan_error_min": min(errors), "plan_error_max": max(errors),
                    "step_s": step_time, "mb_exchanged_per_step": exchanged,
                })  # fmt: skip
    caption_model = f"the model of {args.model_of}" if args.model_of else model
    record_table(
        args.record, f"training-{args.model_of or 'hidden-' + str(args.hidden)}",
        f"Training on one pile-up-{args.pileup:g} event graph ({n_nodes:,} nodes, {n_edges:,} "
        f"edges), {caption_model}, one thread per rank: the largest rank's peak RSS, the plan's "
        "error against each rank's, and the step time",
        measurements, row_label="P = {parts}", column_label="recompute {recompute}",
        cell="{peak_mib_max:,.0f} MiB (plan {plan_error_min:+.1f} .. {plan_error_max:+.1f} %), "
        "{step_s:.2f} s",
    )  # fmt: skip


def _model_of(spec: str) -> dict:
    """The model, loss and precision settings of a run config."""
    from partgnn.resources import resolve_config

    config = yaml.safe_load(resolve_config(spec).read_text())
    return {
        "model": config.get("model", {}),
        "loss": config.get("loss", {}),
        "run": {k: config["run"][k] for k in ("dtype", "bf16") if k in config.get("run", {})},
    }


if __name__ == "__main__":
    main()
