"""Benchmark of halo training across two hosts: step time with communication hidden and not.

The two hosts are network namespaces joined by a veth pair (tools/_two_hosts.py; needs
root), the link rate limited with ``tc tbf`` per ``--links`` (``none``: the veth pair's own speed;
this kernel has no ``netem``, so no added delay). One simulated pile-up event graph is partitioned
with METIS for each P; ``partgnn train`` runs in mode full on one process for t1 and in mode halo
under ``torchrun --nnodes 2`` (P / 2 ranks per host) for each P, link and ``--hide-communication``
setting (``run.hide_communication``), one thread per rank; and in mode naive (sectors without
exchange) over the unlimited link, the same processes without halo communication. Prints markdown
rows; ``--record`` puts the halo runs' step times and efficiencies on the current-figures page:

    .venv/bin/python tools/bench_hosts.py --parts 2 4 --links none 10gbit 1gbit 100mbit

Step time: the median over the optimizer steps after the first of the trainer's seconds per step
(forward, backward, gradient all-reduce, AdamW; reading the event excluded). Parallel efficiency
t1 / (P tP).
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from _common import ToolParser, record_table
from _two_hosts import two_hosts, unavailable_reason


def main() -> None:
    parser = ToolParser(__doc__, figures="two_hosts")
    parser.add_argument("--parts", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--links", nargs="+", default=["none", "10gbit", "1gbit"])
    parser.add_argument(
        "--hide-communication", nargs="+", choices=["on", "off"], default=["on", "off"],
        help="run.hide_communication: halo exchange behind interior edges' work, on and/or off",
    )  # fmt: skip
    parser.renamed("--overlap", "--hide-communication")
    parser.add_argument("--pileup", type=float, default=200.0)
    parser.add_argument("--pt-min", type=float, default=0.0)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--steps", type=int, default=4, help="message-passing steps")
    parser.add_argument("--train-steps", type=int, default=5, help="optimizer steps per run")
    parser.add_argument(
        "--recompute", choices=["on", "off"], default="off",
        help="activation recomputation (model.recompute)",
    )  # fmt: skip
    parser.renamed("--checkpointing", "--recompute")
    parser.tiny(
        parts=[2],
        links=["none"],
        hide_communication=["on"],
        pileup=3.0,
        hidden=8,
        steps=1,
        train_steps=2,
    )
    args = parser.parse_args()
    # A killed benchmark still removes its namespaces (the context manager's finally).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    reason = unavailable_reason()
    if reason is not None:
        sys.exit(f"bench_hosts: two hosts cannot be made here: {reason}")

    from _event_graph import write_event_graph

    from partgnn.partition.event_split import PartitionOptions
    from partgnn.partition.shard_writer import write_shards

    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        graphs = folder / "graphs.h5"
        n_nodes, n_edges = write_event_graph(graphs, pileup=args.pileup, pt_min=args.pt_min)
        print(
            f"event graph: {n_nodes:,} nodes, {n_edges:,} edges; "
            f"Interaction Network H = {args.hidden}, {args.steps} steps, float32, recompute "
            f"{args.recompute}; {os.cpu_count()} cores, one thread per rank\n"
        )
        print(
            "| P | link (per direction) | hide communication | step time (s) | t(off) / t(on) "
            "| parallel efficiency t1 / (P tP) | MB exchanged per step |"
        )
        print("|---|---|---|---|---|---|---|")
        common = {"graphs": graphs, "args": args}
        t1, _ = _run(folder, 1, "none", "off", None, **common)
        print(f"| 1 | - | - | {t1:.2f} | - | 1.00 | 0.0 |", flush=True)
        measurements = []
        for n_parts in args.parts:
            shards = folder / f"metis{n_parts}"
            write_shards(graphs, shards, PartitionOptions(n_parts=n_parts), progress=False)
            # No exchange at all (naive sectors: each rank its interior edges, gradients still
            # all-reduced): what P processes on this machine do without halo communication.
            naive_time, _ = _run(folder, n_parts, "none", "naive", shards, **common)
            print(
                f"| {n_parts} | none | naive sectors (no exchange) | {naive_time:.2f} | "
                f"| {t1 / (n_parts * naive_time):.2f} | 0.0 |",
                flush=True,
            )
            for link in args.links:
                times = {}
                for hide in args.hide_communication:
                    step_time, exchanged = _run(folder, n_parts, link, hide, shards, **common)
                    times[hide] = step_time
                    gain = (
                        f"{times['off'] / times['on']:.3f}"
                        if len(times) == 2 and "on" in times and "off" in times
                        else ""
                    )
                    print(
                        f"| {n_parts} | {link} | {hide} | {step_time:.2f} | {gain} "
                        f"| {t1 / (n_parts * step_time):.2f} | {exchanged:.1f} |",
                        flush=True,
                    )
                    measurements.append({
                        "parts": n_parts, "link": link, "hide_communication": hide,
                        "step_s": step_time, "efficiency": t1 / (n_parts * step_time),
                        "mb_exchanged_per_step": exchanged,
                    })  # fmt: skip
    record_table(
        args.record, "links",
        f"Halo training of one pile-up-{args.pileup:g} event graph ({n_nodes:,} nodes, "
        f"{n_edges:,} edges) across two hosts (network namespaces joined by a veth pair, the "
        f"link shaped), Interaction Network H = {args.hidden}, recompute {args.recompute}: step "
        f"time and parallel efficiency t1 / (P tP) (t1 = {t1:.2f} s on one process)",
        measurements, row_label="P = {parts}, {link}",
        column_label="hide communication {hide_communication}",
        cell="{step_s:.2f} s ({efficiency:.2f})",
    )  # fmt: skip


def _run(
    folder: Path,
    n_parts: int,
    link: str,
    hide: str,
    shards: Path | None,
    *,
    graphs: Path,
    args: argparse.Namespace,
) -> tuple[float, float]:
    """One training run; returns (seconds per step, MB exchanged per step)."""
    run_dir = folder / f"run-{n_parts}-{link}-{hide}"
    config = folder / f"{run_dir.name}.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "mode": "full" if n_parts == 1 else "naive" if hide == "naive" else "halo",
                "data": {"graphs": str(graphs), "shards": str(shards), "val_events": 0},
                "model": {
                    "hidden": args.hidden,
                    "steps": args.steps,
                    "recompute": args.recompute == "on",
                },
                "optim": {"epochs": args.train_steps, "warmup_steps": 1},
                "run": {
                    "dir": str(run_dir),
                    "device": "cpu",
                    "hide_communication": hide != "off",
                    "progress": False,
                    "tensorboard": False,
                    "timeout_s": 3600,
                    "checkpoint_every": 1000,
                },
            }
        )
    )
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("GLOO_SOCKET_IFNAME", None)
    train = ["partgnn", "train", "--config", str(config)]
    started = time.perf_counter()
    if n_parts == 1:
        done = subprocess.run(
            [str(Path(sys.executable).parent / "partgnn"), *train[1:]],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        codes, tails = [done.returncode], [done.stderr]
    else:
        with two_hosts(rate=None if link == "none" else link) as hosts:
            logs = [folder / f"{run_dir.name}-host{host}.log" for host in (0, 1)]
            processes = []
            for host, log in enumerate(logs):
                argv = hosts.torchrun(host, train, nproc=n_parts // 2)
                with log.open("w") as handle:
                    processes.append(hosts.popen(host, argv, env=env, stdout=handle, stderr=handle))
            codes = [process.wait() for process in processes]
            tails = [log.read_text() for log in logs]
    if any(codes):
        last = next((t.strip().splitlines()[-1] for t in tails if t.strip()), "")
        sys.exit(
            f"bench_hosts: P = {n_parts}, link {link}, hide communication {hide} failed (exit "
            f"codes "
            f"{codes}, {time.perf_counter() - started:.0f} s): {last[:200]}"
        )
    from partgnn.metrics.run_summary import RunSummary

    summary = RunSummary.read(run_dir)
    exchanged = summary.bytes_sent / max(summary.steps, 1) / 1e6
    # One training event: metrics.csv has one row (one step) per epoch; the first step warms up.
    with (run_dir / "metrics.csv").open(newline="") as handle:
        times = [float(row["step_time_s"]) for row in csv.DictReader(handle)][1:]
    return statistics.median(times), exchanged


if __name__ == "__main__":
    main()
