"""``partgnn plan``: predict each rank's peak memory for a run config, before running it."""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING

from partgnn import json_files
from partgnn.cli.arg_types import fraction, positive_float, positive_int

if TYPE_CHECKING:
    from partgnn.train.planning.plan import RecomputeChoice
    from partgnn.train.planning.step_time import StepPrediction

MIB = 2**20


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``plan`` to the ``partgnn`` parser."""
    plan = subparsers.add_parser(
        "plan",
        help="predict each rank's peak memory for a run config; how many ranks fit X GB",
        description=(
            "Predicts the peak memory of every rank of a training run from the config's "
            "shards (or graphs file) and model settings: the process, the decoded events and "
            "one training step, whose bytes per edge and per node are measured on four "
            "random probe graphs (~15 s). With --memory-gb, also the fewest ranks "
            "the largest event needs on a device of that size, and whether the run needs "
            "activation recomputation there (the footprint measured both ways)."
        ),
    )
    plan.add_argument("--config", required=True, help="YAML run configuration (path or name)")
    plan.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. --set model.recompute=true (repeatable)",
    )
    plan.add_argument(
        "--memory-gb",
        type=positive_float,
        default=None,
        help="memory of one device (GB = 1e9 bytes): report the ranks the largest event needs",
    )
    plan.add_argument(
        "--headroom",
        type=fraction,
        default=0.15,
        help="with --memory-gb: share of a rank's predicted peak kept free on top of it "
        "(default 0.15; the plan was measured within 15 %% of the peak)",
    )
    plan.add_argument("--max-parts", type=positive_int, default=256, help="most ranks to try")
    plan.add_argument(
        "--step-time",
        action="store_true",
        help="also predict the step time with and without recomputation and CUDA graphs "
        "(times real steps on probe graphs on the run's device) and choose the fastest that fits",
    )
    plan.add_argument(
        "--link",
        choices=("nvlink", "ndr"),
        default="nvlink",
        help="with --step-time: what joins a graph group's GPUs, for the exchange's time "
        "(default nvlink; ndr: InfiniBand NDR between nodes)",
    )
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.set_defaults(run=run_plan)


def run_plan(args: argparse.Namespace) -> int:
    from partgnn.train.config.config_file import load_config
    from partgnn.train.planning.plan import plan_memory
    from partgnn.train.precision import resolve_bf16

    config = load_config(args.config, args.set)
    plan = plan_memory(
        config, memory_gb=args.memory_gb, headroom=args.headroom, max_parts=args.max_parts
    )
    steps = None
    if args.step_time:
        from partgnn.train.planning.plan import feature_widths
        from partgnn.train.planning.step_time import plan_step_times

        steps = plan_step_times(config, plan, feature_widths(config), link=args.link)
    budget = None if args.memory_gb is None else args.memory_gb * 1e9 / (1 + args.headroom)
    if args.json:
        record = plan.as_record(args.memory_gb, args.headroom)
        if steps is not None:
            record["step_time"] = {
                "link": args.link,
                "settings": [{**dataclasses.asdict(p), "step_s": p.step_s} for p in steps],
            }
        print(json_files.dumps(record, indent=2))
        return 0
    device, footprint, ranks = plan.device, plan.footprint, plan.ranks
    choice, needed, method = plan.recompute_choice, plan.needed, plan.method
    model = config.model
    what = (
        f"model {model.target}"
        if model.target
        else f"Interaction Network H = {model.hidden}, {model.steps} steps"
    )
    print(
        f"memory plan: mode {config.mode}, {plan.group_size} rank(s) per graph group, {what}, "
        f"recomputation {'on' if model.recompute else 'off'}, {config.run.dtype}"
        f"{', bf16 autocast' if resolve_bf16(config.run.bf16, device) else ''}, "
        f"device {device}"
    )
    released = (
        f" (x {footprint.released_factor:.2f} where the recomputed edge MLPs give their heap back)"
        if footprint.edge_width
        else ""
    )
    print(
        f"one training step: {footprint.per_edge:.0f} B per edge + {footprint.per_node:.0f} B "
        f"per node + {footprint.constant / MIB:.1f} MiB live, held x "
        f"{footprint.resident_factor:.2f}{released} (measured on {len(footprint.probes) + 1} "
        f"probe graphs in {plan.probe_seconds:.1f} s)"
    )
    if device.type == "cpu":
        print(f"process: {plan.base_bytes / MIB:.0f} MiB (an idle partgnn process on this machine)")
    else:
        print("device memory only: the CUDA context (a few hundred MiB) comes on top")
    print()
    print(_table(ranks))
    print(f"\npredicted peak of the largest rank: {plan.peak_bytes / MIB:.0f} MiB")
    if choice is not None:
        print(_choice_line(choice, args.memory_gb, args.headroom))
    if steps is not None:
        print()
        print(_step_lines(steps, plan, args.link, budget))
    if needed is not None:
        event = f"the largest event ({needed.event.nodes:,} nodes, {needed.event.edges:,} edges)"
        kept = f"{args.headroom:.0%} of the prediction kept free"
        if needed.n_parts is None:
            print(
                f"{event} does not fit {args.memory_gb:g} GB per rank with up to "
                f"{args.max_parts} ranks ({method}; {kept})"
            )
            return 1
        largest = max(r.total_bytes for r in needed.ranks)
        print(
            f"{event} needs {needed.n_parts} rank(s) of {args.memory_gb:g} GB "
            f"({method}; largest rank {largest / MIB:.0f} MiB, {kept})"
        )
    return 0


def _choice_line(choice: RecomputeChoice, memory_gb: float, headroom: float) -> str:
    """One line: the recomputation setting for devices of ``memory_gb`` and why."""
    off, on = choice.peak_off / MIB, choice.peak_on / MIB
    sizes = f"largest rank {off:.0f} MiB without recomputation, {on:.0f} MiB with"
    kept = f"{headroom:.0%} of the prediction kept free"
    if choice.recompute is None:
        return (f"recomputation: neither setting fits {memory_gb:g} GB per rank at this world "
                f"size ({sizes}; {kept}): more ranks per graph")  # fmt: skip
    setting = "true" if choice.recompute else "false"
    why = "it fits without" if not choice.recompute else "it does not fit without"
    return (f"recomputation for {memory_gb:g} GB per rank: {'on' if choice.recompute else 'off'}"
            f" ({why}: {sizes}; {kept}): --set model.recompute={setting}")  # fmt: skip


def _step_lines(steps: list[StepPrediction], plan, link: str, budget: float | None) -> str:
    """The predicted steps as a table, and the setting chosen."""
    from partgnn.train.planning.step_time import fastest

    head = f"step time of the largest rank: compute timed on probe graphs on {plan.device}"
    if plan.group_size > 1:
        head += f"; halo exchanges and gradient all-reduce modelled on {link}, counted whole"
    lines = [
        head,
        "",
        "| recomputation | CUDA graphs | compute s | exchange s | all-reduce s | step s "
        "| peak MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in steps:
        peak = "-" if p.peak_bytes is None else f"{p.peak_bytes / MIB:.0f}"
        lines.append(
            f"| {'on' if p.recompute else 'off'} | {'on' if p.captured else 'off'} "
            f"| {p.compute_s:.4f} | {p.exchange_s:.4f} | {p.allreduce_s:.4f} | {p.step_s:.4f} "
            f"| {peak} |"
        )
    if plan.device.type != "cuda":
        lines.append(f"CUDA graphs: none on {plan.device} (a GPU replays the step)")
    chosen = fastest(steps, budget)
    if chosen is None:
        lines.append("chosen: no setting fits the memory given")
    else:
        graphs = "auto" if chosen.captured else "off"
        fits = " that fits" if budget is not None else ""
        lines.append(
            f"chosen: the fastest{fits}, recomputation {'on' if chosen.recompute else 'off'}, "
            f"CUDA graphs {'on' if chosen.captured else 'off'} ({chosen.step_s:.4f} s): "
            f"--set model.recompute={str(chosen.recompute).lower()} "
            f"--set run.cuda_graphs={graphs}"
        )
    return "\n".join(lines)


def _table(ranks) -> str:
    lines = [
        "| rank | nodes (halo) | edges | process MiB | data MiB | step MiB | peak MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in ranks:
        lines.append(
            f"| {r.rank} | {r.nodes:,} ({r.halo:,}) | {r.edges:,} | {r.base_bytes / MIB:.0f} "
            f"| {r.data_bytes / MIB:.0f} | {r.step_bytes / MIB:.0f} | {r.total_bytes / MIB:.0f} |"
        )
    return "\n".join(lines)
