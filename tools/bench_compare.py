"""Naive, overlapping and halo strategies against P: physics split by the boundary, and costs.

Uses the data and the full-graph model of ``tools/bench_recipe.py`` (``--recipe DIR``: 100
training + 5 validation simulated pile-up-200 pT > 1 GeV events, 5 held-out test events, and the
recipe model in ``DIR/run``). For each partition method and P it

1. partitions the training and test graphs into plain sectors and into sectors extended by
   ``steps + 1`` hops (overlapping sectors: exact on owned edges without communication);
2. trains the recipe (configs/recipe.yaml, unchanged) on P ranks as naive sectors and as
   overlapping sectors;
3. measures halo exchange's cost with ``--halo-steps`` steps of the same recipe on P ranks (its
   model *is* the full-graph recipe model: the exchange is exact, as tests/distributed and
   tests/train prove, so it is not trained again);
4. scores the test events (halo: the recipe model with the exchange; naive and overlap: their
   own models sector by sector) and evaluates them against the plain sectors: edge efficiency
   on boundary vs interior edges, track efficiency of particles whose hits span sectors vs
   particles inside one.

At full size (``--config full-recipe --recipe bench-full``, the data and model of
``tools/bench_full_recipe.py``), training a model per strategy, method and P is out of reach
of a 2-core machine (2 hours each); ``--sector-models recipe`` scores naive and overlapping
sectors with the recipe's own model instead (what a boundary costs a model that never had to
learn around it), and every strategy's costs come from ``--halo-steps`` training steps on the
graphs ``--cost-graphs`` names (e.g. ``val``: the validation events, so the training events
need no partitioning); ``--cut`` evaluates at cuts chosen on validation events (several: one
table each, e.g. the cut keeping 99 % of the target edges and the cut of the best track
efficiency; the first is ``evaluation.json`` of a run, the others ``evaluation-cutC.json``).

Prints markdown tables and draws ``OUT/spanning_vs_p.png`` and
``OUT/cost_vs_p.png``; ``--record`` puts each cut's spanning-track and target edge efficiencies
on the current-figures page (``--record docs/results/figures/comparison_full.json`` for full
events). Finished runs are kept and skipped on a re-run (a run directory with
its ``evaluation.json`` is finished; ``docs/results/compare/`` keeps the small files of the
finished runs, which can be copied into ``OUT/runs/`` to resume on a new checkout)::

    OMP_NUM_THREADS=1 .venv/bin/python tools/bench_compare.py --recipe bench-recipe \\
        --out bench-compare --methods phi metis --parts 2 4 8 16
    OMP_NUM_THREADS=1 .venv/bin/python tools/bench_compare.py --recipe bench-full \
        --config full-recipe --sector-models recipe --cost-graphs val --halo-steps 3 \
        --cut CUT [CUT ...] --out bench-compare-full --methods metis phi --parts 4 8
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
from functools import partial
from pathlib import Path

import numpy as np
from _common import ToolParser, partgnn, record_table
from _paths import shipped_config
from matplotlib.figure import Figure

from partgnn.metrics.report import load_run
from partgnn.train.config.config_file import load_config

#: One partgnn command, echoed to stderr; data preparation runs in this process.
_partgnn = partial(partgnn, echo=True, threads=None)
STRATEGIES = ("naive", "overlap", "halo")
#: The training mode of each of the tool's strategies (its run folders' and rows' names).
MODES = {"naive": "naive", "overlap": "overlapping", "halo": "halo"}


def main() -> None:
    parser = ToolParser(__doc__, figures="comparison_pt1")
    parser.add_argument("--recipe", type=Path, default=Path("bench-recipe"))
    parser.add_argument("--out", type=Path, default=Path("bench-compare"))
    parser.add_argument("--methods", nargs="+", default=["phi", "metis"])
    parser.add_argument("--parts", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--halo-steps", type=int, default=50)
    parser.add_argument("--val-events", type=int, default=5)
    parser.add_argument("--config", default="recipe", help="shipped config the runs train")
    parser.add_argument(
        "--sector-models",
        choices=("trained", "recipe"),
        default="trained",
        help="naive/overlap score with models trained on their sectors, or the recipe's model",
    )
    parser.add_argument(
        "--cost-graphs",
        default="train",
        help="graphs-NAME.h5 of --recipe the cost steps (and sector training) run on",
    )
    parser.add_argument(
        "--cut", nargs="+", default=[None], help="evaluate at these score cuts (one table each)"
    )
    parser.add_argument(
        "--tables-only", action="store_true", help="print the tables of the finished cells"
    )
    parser.add_argument(
        "--strategies", nargs="+", choices=STRATEGIES, default=list(STRATEGIES),
        help="the strategies to train and score (default: all)",
    )  # fmt: skip
    parser.tiny(
        methods=["phi"], parts=[2], halo_steps=2, val_events=1, sector_models="recipe",
        strategies=["halo"],
    )  # fmt: skip
    args = parser.parse_args()
    out, recipe = args.out, args.recipe
    out.mkdir(parents=True, exist_ok=True)
    args.config_path = shipped_config(args.config)
    margin = load_config(args.config_path).model.steps + 1
    model = recipe / "run" / "checkpoints" / "last.pt"
    if not model.exists():
        sys.exit(f"{model}: run tools/bench_recipe.py --out {recipe} first")
    graphs = {name: recipe / f"graphs-{name}.h5" for name in (args.cost_graphs, "test")}
    graphs["train"] = graphs.pop(args.cost_graphs)
    results = []
    for method in args.methods:
        for n_parts in args.parts:
            if not args.tables_only:
                _run_cell(out, recipe, graphs, model, method, n_parts, margin, args)
            results += _read_cell(out, method, n_parts, args.cut)
    _print_tables(results, margin, args)
    _plot(results, out)
    models = ("models trained on their sectors" if args.sector_models == "trained"
              else "the recipe's model")  # fmt: skip
    for cut in _cuts(results):
        scored = "each at its own cut" if cut is None else f"at cut {cut}"
        record_table(
            args.record, f"strategies-cut-{cut or 'own'}",
            f"Naive, overlapping ({margin} hops) and halo sectors of {args.config}'s graphs, "
            f"scored {scored} ({models}): track efficiency of particles whose hits span "
            "sectors, and target edge efficiency",
            [
                {"method": r["method"], "parts": r["P"], "strategy": r["strategy"],
                 "spanning": r["track"].spanning_efficiency,
                 "target": r["edge"].target_efficiency}
                for r in results if r["asked"] == cut
            ],
            row_label="{method}, P = {parts}", column_label="{strategy}",
            cell="{spanning:.3f} ({target:.4f})",
        )  # fmt: skip


def _shards(out: Path, method: str, n_parts: int, name: str, margin: int) -> Path:
    suffix = f"-margin{margin}" if margin else ""
    return out / "shards" / f"{method}{n_parts}-{name}{suffix}"


def _run_dir(out: Path, method: str, n_parts: int, strategy: str) -> Path:
    return out / "runs" / f"{method}{n_parts}-{strategy}"


def _evaluation_name(cuts: list[str | None], cut: str | None) -> str:
    """``evaluation.json`` for the first cut asked, ``evaluation-cutC.json`` for the others."""
    return "evaluation.json" if cut == cuts[0] else f"evaluation-cut{cut}.json"


def _run_cell(
    out: Path,
    recipe: Path,
    graphs: dict[str, Path],
    model: Path,
    method: str,
    n_parts: int,
    margin: int,
    args: argparse.Namespace,
) -> None:
    for name, path in graphs.items():
        for k in (0, margin):
            shards = _shards(out, method, n_parts, name, k)
            if not shards.exists():
                _partgnn(
                    "partition",
                    str(path),
                    "--parts",
                    str(n_parts),
                    "--method",
                    method,
                    "--margin",
                    str(k),
                    "--out",
                    str(shards),
                )
    sectors_test = _shards(out, method, n_parts, "test", 0)
    for strategy in args.strategies:
        run_dir = _run_dir(out, method, n_parts, strategy)
        k = margin if strategy == "overlap" else 0
        mode = MODES[strategy]
        overrides = [
            f"mode={mode}",
            f"data.graphs={graphs['train']}",
            f"data.shards={_shards(out, method, n_parts, 'train', k)}",
            f"data.val_events={args.val_events}",
            f"run.dir={run_dir}",
            "run.progress=false",
            "run.tensorboard=false",
            "run.timeout_s=1800",
        ]
        recipe_model = strategy == "halo" or args.sector_models == "recipe"
        if recipe_model:  # trained for its costs only
            overrides.append(f"optim.max_steps={args.halo_steps}")
        if not (run_dir / "summary.json").exists():
            _launch(
                n_parts,
                "train",
                "--resume",
                "auto",  # an interrupted run continues
                "--config",
                str(args.config_path),
                *(a for o in overrides for a in ("--set", o)),
            )
        checkpoint = model if recipe_model else run_dir / "checkpoints" / "last.pt"
        scores = run_dir / "scores-test.h5"
        evaluations = [run_dir / _evaluation_name(args.cut, cut) for cut in args.cut]
        if all(path.exists() for path in evaluations):  # finished (or restored from docs/results)
            continue
        if not scores.exists():
            _launch(
                n_parts,
                "infer",
                "--checkpoint",
                str(checkpoint),
                "--shards",
                str(_shards(out, method, n_parts, "test", k)),
                "--out",
                str(scores),
                "--device",
                "cpu",
                "--mode",
                mode,
            )
        for cut, evaluation in zip(args.cut, evaluations, strict=True):
            if not evaluation.exists():
                _partgnn(
                    "evaluate",
                    str(scores),
                    "--graphs",
                    str(graphs["test"]),
                    "--events",
                    str(recipe / "events-test.h5"),
                    "--shards",
                    str(sectors_test),
                    "--out",
                    str(evaluation),
                    *(["--cut", cut] if cut is not None else []),
                )


def _read_cell(out: Path, method: str, n_parts: int, cuts: list[str | None]) -> list[dict]:
    """The finished runs of one cell, one result per strategy and cut asked."""
    results = []
    for strategy in STRATEGIES:
        run_dir = _run_dir(out, method, n_parts, strategy)
        for cut in cuts:
            evaluation = run_dir / _evaluation_name(cuts, cut)
            if evaluation.exists():
                result = _result(run_dir, evaluation, method, n_parts, strategy)
                results.append({**result, "asked": cut})
    return results


def _result(run_dir: Path, evaluation: Path, method: str, n_parts: int, strategy: str) -> dict:
    run = load_run(run_dir)
    from partgnn.metrics.evaluation_results import EvaluationResults

    metrics = EvaluationResults.read(evaluation)
    return {
        "method": method,
        "P": n_parts,
        "strategy": strategy,
        "run": run,
        "edge": metrics.edge,
        "track": metrics.track,
        "cut": metrics.cut,
    }


def _launch(n_ranks: int, *arguments: str) -> None:
    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    partgnn(*arguments, ranks=n_ranks, threads=threads, echo=True)


def _fmt(value: float | None, spec: str) -> str:
    return (
        "n/a"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else (format(value, spec))
    )


def _print_tables(results: list[dict], margin: int, args: argparse.Namespace) -> None:
    print(
        f"machine: {os.cpu_count()} cores ({platform.machine()}), OMP_NUM_THREADS="
        f"{os.environ.get('OMP_NUM_THREADS', 'unset')} per rank; overlap margin {margin} hops "
        f"(steps + 1); halo cost from {args.halo_steps} steps, halo physics from the "
        f"full-graph model of {args.config}; naive and overlap physics from "
        f"{'that model' if args.sector_models == 'recipe' else 'models trained on their sectors'}"
        "\n"
    )
    for cut in _cuts(results):
        print(
            "| method | P | strategy | cut | edge eff. | target edge eff. | purity "
            "| boundary-edge eff. | interior-edge eff. | track eff. "
            "| spanning-track eff. (particles) | contained-track eff. | fake rate | impure rate |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in results:
            if r["asked"] != cut:
                continue
            edge, track = r["edge"], r["track"]
            print(
                f"| {r['method']} | {r['P']} | {r['strategy']} | {r['cut']:.3f} "
                f"| {_fmt(edge.efficiency, '.4f')} "
                f"| {_fmt(edge.target_efficiency, '.4f')} "
                f"| {_fmt(edge.purity, '.4f')} "
                f"| {_fmt(edge.boundary_efficiency, '.4f')} "
                f"| {_fmt(edge.interior_efficiency, '.4f')} "
                f"| {_fmt(track.efficiency, '.4f')} "
                f"| {_fmt(track.spanning_efficiency, '.4f')} ({track.n_spanning_targets}) "
                f"| {_fmt(track.contained_efficiency, '.4f')} "
                f"| {_fmt(track.fake_rate, '.4f')} | {_fmt(track.impure_rate, '.4f')} |"
            )
        print()
    print(
        "| method | P | strategy | step time [ms] | peak RSS / rank [MB] | MB exchanged / step "
        "| replicated nodes | replicated edges | training steps | training minutes |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    first_cut = _cuts(results)[:1]
    for r in results:
        if r["asked"] not in first_cut:  # costs do not depend on the cut
            continue
        run = r["run"]
        per_step = run.mb_exchanged / run.steps if run.steps else float("nan")
        print(
            f"| {r['method']} | {r['P']} | {r['strategy']} | {_fmt(run.step_time_ms, '.0f')} "
            f"| {_fmt(run.peak_memory_mb, '.0f')} | {_fmt(per_step, '.3f')} "
            f"| {_fmt(100 * run.replicated_nodes, '+.1f')}% "
            f"| {_fmt(100 * run.replicated_edges, '+.1f')}% | {run.steps} "
            f"| {_fmt(run.wall_time_s / 60, '.1f')} |"
        )


def _cuts(results: list[dict]) -> list[str | None]:
    """The cuts asked for (``None``: each run's own), in the order first met."""
    return list(dict.fromkeys(r["asked"] for r in results))


def _plot(results: list[dict], out: Path) -> None:
    methods = sorted({r["method"] for r in results})
    if not methods:
        return
    colours = {"naive": "tab:red", "overlap": "tab:green", "halo": "tab:blue"}
    parts = sorted({r["P"] for r in results})

    def p_axis(ax) -> None:
        ax.set_xscale("log", base=2)
        ax.set_xticks(parts, [str(p) for p in parts])
        ax.minorticks_off()
        ax.set_xlabel("P (sectors)")

    def series(
        method: str, strategy: str, value, cut: str | None = None
    ) -> tuple[list[int], list[float]]:
        cut = cut or results[0]["asked"]  # costs: one row per run
        rows = sorted(
            (
                r
                for r in results
                if r["method"] == method and r["strategy"] == strategy and r["asked"] == cut
            ),
            key=lambda r: r["P"],
        )
        return [r["P"] for r in rows], [value(r) for r in rows]

    cuts = _cuts(results)
    for cut in cuts:
        figure = Figure(figsize=(5 * len(methods), 4), layout="constrained")
        axes = np.atleast_1d(figure.subplots(1, len(methods)))
        for ax, method in zip(axes, methods, strict=True):
            for strategy in STRATEGIES:
                x, y = series(method, strategy, lambda r: r["track"].spanning_efficiency, cut)
                ax.plot(x, y, "o-", color=colours[strategy], label=strategy)
            p_axis(ax)
            ax.set_ylabel("track efficiency, particles spanning sectors")
            ax.set_title(f"{method} sectors" + (f", cut {cut}" if len(cuts) > 1 else ""))
            ax.legend()
        name = "spanning_vs_p" if cut == cuts[0] else f"spanning_vs_p-cut{cut}"
        figure.savefig(out / f"{name}.png", dpi=120)

    panels = (
        ("step time [ms]", lambda r: r["run"].step_time_ms),
        ("peak RSS per rank [MB]", lambda r: r["run"].peak_memory_mb),
        ("replicated edges [% of counted]", lambda r: 100 * r["run"].replicated_edges),
    )
    figure = Figure(figsize=(15, 4), layout="constrained")
    for ax, (label, value) in zip(figure.subplots(1, len(panels)), panels, strict=True):
        for method, style in zip(methods, ("o-", "s--", "^:"), strict=False):
            for strategy in STRATEGIES:
                x, y = series(method, strategy, value)
                ax.plot(x, y, style, color=colours[strategy], label=f"{strategy} ({method})")
        p_axis(ax)
        ax.set_ylabel(label)
    figure.axes[0].legend(fontsize=7)
    figure.savefig(out / "cost_vs_p.png", dpi=120)


if __name__ == "__main__":
    main()
