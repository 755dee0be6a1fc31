"""What a wider input costs: training on acorn's 12 node features against partgnn's 4.

acorn's CTD 2023 GNN reads 12 node features: r, phi, z, eta and the same four of the hit's one
or two strip clusters (``cluster_r_1`` ... ``cluster_eta_2``, fields an acorn file keeps beside
its graphs). This tool simulates one event (``--pileup``, ``--pt-min``), builds its graph, adds
such per-hit fields (stand-ins: the hit's own position moved by a strip's stereo offset; the
cost does not depend on the values), and trains the model of ``--model-of`` (default the full
recipe's) a few steps on 1 rank (full) and on 2 (halo, METIS shards that carry the fields), with
``data.node_features`` the 4 default columns and the 12, alternating, ``--repeats`` times each
(a run's step time and peak vary by ~10 % from one run to the next on a shared machine: the
medians are compared). Before each run ``partgnn plan``
predicts every rank's peak; the rows show it beside the measured peak RSS. The step time
changes by the first layer's width only when the difference matches what the node encoder's
first layer costs alone: ``Linear(F, H)`` forward and backward on the rank's nodes, timed here
at F = 4 and 12 (one thread, as the ranks run).

    .venv/bin/python tools/bench_input_width.py --record
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
from pathlib import Path

import numpy as np
import yaml
from _common import ToolParser, best_of, markdown_table, partgnn, planned_mib, record_table

#: partgnn's own four node columns (the default) and acorn's 12 (its CTD 2023 node_features).
OWN = ["r", "phi", "z", "eta"]
CLUSTER_FIELDS = [f"cluster_{q}_{i}" for i in (1, 2) for q in ("r", "phi", "z", "eta")]
SCALES = {"r": 1000.0, "phi": float(np.pi), "z": 1000.0, "eta": 1.0}
WIDTHS = {4: OWN, 12: OWN + CLUSTER_FIELDS}


def main() -> None:
    parser = ToolParser(__doc__, figures="training_memory")
    parser.add_argument("--pileup", type=float, default=200.0)
    parser.add_argument("--pt-min", type=float, default=0.5)
    parser.add_argument("--model-of", default="full-recipe", metavar="CONFIG")
    parser.add_argument("--parts", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--train-steps", type=int, default=8, help="optimizer steps per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each width, alternating")
    parser.tiny(pileup=3.0, pt_min=1.0, parts=[1], train_steps=2, repeats=1)
    args = parser.parse_args()
    base = _model_of(args.model_of)
    if args.tiny:  # (the planner's probe graphs are event-sized: a small model probes them fast)
        base["model"] = {**base["model"], "hidden": 8, "steps": 1}
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        graphs, n_nodes, n_edges = _graph_with_clusters(folder, args.pileup, args.pt_min)
        print(
            f"event graph: {n_nodes:,} nodes, {n_edges:,} edges; the model of {args.model_of} "
            f"(hidden {base['model'].get('hidden')}); {os.cpu_count()} cores, one thread per "
            "rank\n"
        )
        rows, measured = [], {}
        for n_parts in args.parts:
            shards = folder / f"metis{n_parts}"
            if n_parts > 1:
                from partgnn.partition.event_split import PartitionOptions
                from partgnn.partition.shard_writer import write_shards

                write_shards(graphs, shards, PartitionOptions(n_parts=n_parts), progress=False)
            runs: dict[int, list[dict]] = {width: [] for width in WIDTHS}
            for _ in range(args.repeats):
                # (--tiny trains the 12 columns only, its smoke run's path, and compares them
                # with themselves: every run is a plan and a training process start)
                for width in (12,) if args.tiny else WIDTHS:
                    runs[width].append(
                        _train(folder, graphs, shards, n_parts, WIDTHS[width], base,
                               args.train_steps)
                    )  # fmt: skip
            if args.tiny:
                runs[4] = runs[12]
            for width in WIDTHS:
                measured[n_parts, width] = run = _median_run(runs[width])
                rows.append([
                    n_parts, width, f"{run['step_time']:.3f}",
                    " / ".join(f"{m:.0f}" for m in run["peak"]),
                    " / ".join(f"{p:.0f}" for p in run["planned"]),
                    " / ".join(f"{100 * (p / m - 1):+.1f} %"
                               for p, m in zip(run["planned"], run["peak"], strict=True)),
                ])  # fmt: skip
        print(markdown_table(("P", "node features", "step time (s)", "peak RSS per rank (MiB)",
                              "planned (MiB)", "plan error"), rows))  # fmt: skip
        hidden = int(base["model"].get("hidden", 64))
        measurements = []
        for n_parts in args.parts:
            narrow, wide = measured[n_parts, 4], measured[n_parts, 12]
            layer = {f: _first_layer_time(-(-n_nodes // n_parts), f, hidden) for f in WIDTHS}
            step_delta = wide["step_time"] - narrow["step_time"]
            layer_delta = layer[12] - layer[4]
            peak_ratio = max(wide["peak"]) / max(narrow["peak"])
            plan_error = max(
                abs(p / m - 1) for p, m in zip(wide["planned"], wide["peak"], strict=True)
            )
            print(
                f"P = {n_parts}: step {narrow['step_time']:.3f} -> {wide['step_time']:.3f} s "
                f"({wide['step_time'] / narrow['step_time']:.3f}x, {1e3 * step_delta:+.1f} ms); "
                f"the first layer alone {1e3 * layer[4]:.2f} -> {1e3 * layer[12]:.2f} ms "
                f"({1e3 * layer_delta:+.2f} ms); peak {peak_ratio:.3f}x; the plan within "
                f"{100 * plan_error:.1f} % of the 12-feature run's peak"
            )
            for width in WIDTHS:
                run = measured[n_parts, width]
                worst = max(zip(run["planned"], run["peak"], strict=True),
                            key=lambda pair: abs(pair[0] / pair[1] - 1))  # fmt: skip
                measurements.append({
                    "parts": n_parts, "width": width, "step_s": run["step_time"],
                    "step_ratio": run["step_time"] / narrow["step_time"],
                    "layer_ms": 1e3 * layer[width], "peak_mib": max(run["peak"]),
                    "plan_error_percent": 100 * (worst[0] / worst[1] - 1),
                })  # fmt: skip
        record_table(
            args.record, "input_width",
            f"Training on acorn's 12 node features against partgnn's 4: one event graph of "
            f"{n_nodes:,} nodes and {n_edges:,} edges (pile-up {args.pileup:g}, pT > "
            f"{args.pt_min:g} GeV), the model of {args.model_of}, {args.train_steps} steps, one "
            f"thread per rank; medians of {args.repeats} alternating runs: step time (x the "
            "4 features'), the node encoder's first layer alone, the largest rank's peak RSS "
            "and partgnn plan's error on the worst rank",
            measurements,
            row_label="P = {parts}", column_label="{width} node features",
            cell="{step_s:.3f} s ({step_ratio:.3f}x; first layer {layer_ms:.2f} ms), "
            "{peak_mib:,.0f} MiB (plan {plan_error_percent:+.1f} %)",
        )  # fmt: skip


def _median_run(runs: list[dict]) -> dict:
    """The median step time and, per rank, the median peak of repeated runs (the plan is the
    same each time)."""
    return {
        "step_time": statistics.median(r["step_time"] for r in runs),
        "peak": [statistics.median(p) for p in zip(*(r["peak"] for r in runs), strict=True)],
        "planned": runs[0]["planned"],
    }


def _graph_with_clusters(folder: Path, pileup: float, pt_min: float) -> tuple[Path, int, int]:
    """One event's graph with acorn's eight cluster fields kept beside it."""
    from _event_graph import write_event_graph

    from partgnn.data.files.storage import GraphFile
    from partgnn.data.files.writers import write_graphs

    plain = folder / "plain.h5"
    write_event_graph(plain, pileup=pileup, pt_min=pt_min)
    with GraphFile(plain) as graphs:
        graph, quality = graphs[0], graphs.quality(0)
    r, phi, z = (
        graph.x[:, i].double().numpy() * SCALES[q] for i, q in enumerate(("r", "phi", "z"))
    )
    fields = {}
    for i, stereo in ((1, 0.0), (2, 0.02)):  # the second strip's 20 mrad stereo angle
        moved_z = z + stereo * r
        fields |= {
            f"cluster_r_{i}": r, f"cluster_phi_{i}": phi + stereo * 1e-3,
            f"cluster_z_{i}": moved_z, f"cluster_eta_{i}": np.arcsinh(moved_z / r),
        }  # fmt: skip
    graphs_path = folder / "graphs.h5"
    write_graphs(graphs_path, [(graph, quality, fields)])
    return graphs_path, graph.num_nodes, int(graph.edge_index.shape[1])


def _train(
    folder: Path,
    graphs: Path,
    shards: Path,
    n_parts: int,
    columns: list[str],
    base: dict,
    train_steps: int,
) -> dict:
    """Plans and trains one run; its median step time, peak RSS per rank and the plan."""
    from partgnn.metrics.run_summary import RunSummary

    name = f"p{n_parts}-f{len(columns)}"
    run_dir = folder / name
    config = folder / f"{name}.yaml"
    data = {"graphs": str(graphs), "val_events": 0,
            "node_features": [{c: SCALES.get(c.split("_")[1] if "_" in c else c, 1.0)}
                              for c in columns]}  # fmt: skip
    if n_parts > 1:
        data["shards"] = str(shards)
    config.write_text(yaml.safe_dump({
        "mode": "full" if n_parts == 1 else "halo",
        "data": {**base["data"], **data},
        "model": base["model"], "loss": base["loss"],
        "optim": {"epochs": train_steps, "warmup_steps": 1},
        "run": {**base["run"], "dir": str(run_dir), "device": "cpu", "progress": False,
                "tensorboard": False, "timeout_s": 3600, "checkpoint_every": 1000},
    }))  # fmt: skip
    planned = planned_mib(config)
    partgnn("train", "--config", config, ranks=n_parts)  # (a failure stops the tool, saying why)
    final = RunSummary.read(run_dir).require_final()
    shutil.rmtree(run_dir)  # (the next repeat starts afresh)
    return {
        "step_time": final.step_time_s,
        "peak": final.peak_memory_mb_per_rank,
        "planned": planned,
    }


def _first_layer_time(n_nodes: int, width: int, hidden: int) -> float:
    """Seconds of ``Linear(width, hidden)`` forward and backward on ``n_nodes`` rows (the node
    encoder's first layer; its input needs no gradient), one thread, median of best-of runs."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        layer = torch.nn.Linear(width, hidden)
        inputs = torch.randn(n_nodes, width)

        def step() -> None:
            layer(inputs).sum().backward()

        return statistics.median(best_of(step, 20) for _ in range(3))
    finally:
        torch.set_num_threads(threads)


def _model_of(spec: str) -> dict:
    """The data options, model, loss and precision settings of a run config."""
    from partgnn.resources import resolve_config

    config = yaml.safe_load(resolve_config(spec).read_text())
    data = {k: v for k, v in config.get("data", {}).items() if k in ("standardise", "cache_mb")}
    return {
        "data": data,
        "model": config.get("model", {}),
        "loss": config.get("loss", {}),
        "run": {k: v for k, v in config.get("run", {}).items()
                if k in ("dtype", "bf16", "keep_freed_heap")},
    }  # fmt: skip


if __name__ == "__main__":
    main()
