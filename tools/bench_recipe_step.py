"""Seconds per training step of the full-graph recipe on P ranks, for variants of how it computes.

Each variant trains the shipped ``full-recipe`` config (halo mode) from scratch for ``--steps``
steps on ``--shards`` (the METIS shards of the recipe's training graphs that
tools/bench_full_recipe.py makes) with the variant's ``--set`` overrides, the variants one after
another on this machine's cores, one thread per rank. Per variant: the trainer's mean step time
over the steps (``step_time_s``), the largest rank's peak memory, and the nodes and edges the
ranks computed per step (``workload``)::

    OMP_NUM_THREADS=1 .venv/bin/python tools/bench_recipe_step.py --shards W/metis2 \\
        --variant recomputation model.recompute=true \\
        --variant "all nodes" model.skip_unconnected=false \\
        --variant recipe

A variant is ``--variant NAME [KEY=VALUE ...]``; without ``--variant``, the three above.
"""

from __future__ import annotations

import csv
import sys
import tempfile
from pathlib import Path

from _common import ToolParser, markdown_table, partgnn, record_table, train_sitting
from _paths import shipped_config

CONFIG = shipped_config("full-recipe")
#: The variants measured without ``--variant``: name -> overrides.
DEFAULT_VARIANTS = {
    "recomputation (model.recompute=true)": ["model.recompute=true"],
    "every node (model.skip_unconnected=false)": ["model.skip_unconnected=false"],
    "the recipe (configs/full-recipe.yaml)": [],
}
#: What a tiny run trains: a small model in float32 on a few small events.
TINY_OVERRIDES = ["model.hidden=8", "model.steps=2", "model.fused=false", "run.bf16=false",
                  "data.cache_mb=64"]  # fmt: skip


def main() -> None:
    parser = ToolParser(__doc__, figures="step_time")
    parser.add_argument("--shards", type=Path, help="the recipe's training shards")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument(
        "--variant", nargs="+", action="append", metavar=("NAME", "KEY=VALUE"), default=None
    )
    parser.add_argument("--set", action="append", default=[], dest="overrides",
                        help="for every variant")  # fmt: skip
    parser.tiny(steps=2)
    args = parser.parse_args()
    variants = (
        {variant[0]: variant[1:] for variant in args.variant} if args.variant else DEFAULT_VARIANTS
    )
    with tempfile.TemporaryDirectory() as folder:
        shards, common = args.shards, list(args.overrides)
        if args.tiny:
            shards = shards or _tiny_shards(Path(folder), args.ranks)
            common = TINY_OVERRIDES + common
        if shards is None:
            parser.error("give --shards (the recipe's METIS shards, tools/bench_full_recipe.py)")
        results = {
            name: _measure(Path(folder) / f"run{i}", shards, args, [*common, *overrides])
            for i, (name, overrides) in enumerate(variants.items())
        }
    rows = [
        (name, f"{r['step_s']:.2f}", f"{r['peak_gb']:.2f}", f"{r['nodes']:,.0f}",
         f"{r['edges']:,.0f}")
        for name, r in results.items()
    ]  # fmt: skip
    print(markdown_table(
        ("variant", "s per step", "peak per rank [GB]", "nodes computed per step",
         "edges computed per step"), rows,
    ))  # fmt: skip
    if args.tiny:
        return
    record_table(
        args.record, "recipe_step",
        f"The full recipe's training step (configs/full-recipe.yaml, halo) on {args.ranks} ranks "
        f"of one thread, by how it computes: seconds per step (the mean of {args.steps}), the "
        "largest rank's peak memory, and the nodes and edges the ranks computed per step",
        [{"variant": name, **r} for name, r in results.items()],
        row_label="{variant}", column_label="s per step, peak per rank, computed per step",
        cell="{step_s:.2f} s, {peak_gb:.2f} GB, {nodes:,.0f} nodes and {edges:,.0f} edges",
    )  # fmt: skip


def _measure(run_dir: Path, shards: Path, args, overrides: list[str]) -> dict[str, float]:
    """One variant's run; its step time, peak and work per step."""
    code, _ = train_sitting(
        CONFIG,
        [
            "mode=halo", f"data.shards={shards}", "data.val_events=1", f"run.dir={run_dir}",
            "run.progress=false", f"optim.max_steps={args.steps}", "run.checkpoint_every=100000",
            *overrides,
        ],
        args.ranks,
        log=run_dir.with_suffix(".log"),
    )  # fmt: skip
    if code:
        sys.exit(f"training failed (exit {code}): {run_dir.with_suffix('.log').read_text()}")
    with open(run_dir / "metrics.csv", newline="") as handle:
        last = list(csv.DictReader(handle))[-1]
    from partgnn.metrics.run_summary import RunSummary

    workload, steps = RunSummary.read(run_dir).workload, int(last["step"])
    return {
        "step_s": float(last["step_time_s"]),
        "peak_gb": float(last["peak_memory_mb_max"]) / 1024,
        "nodes": workload.computed_nodes / steps,
        "edges": workload.computed_edges / steps,
    }


def _tiny_shards(folder: Path, ranks: int) -> Path:
    partgnn("simulate", "--events", "3", "--pileup", "2", "--seed", "1", "--out",
            folder / "events.h5")  # fmt: skip
    partgnn("build-graphs", folder / "events.h5", "--out", folder / "graphs.h5")
    partgnn("partition", folder / "graphs.h5", "--parts", ranks, "--out", folder / "shards")
    return folder / "shards"


if __name__ == "__main__":
    main()
