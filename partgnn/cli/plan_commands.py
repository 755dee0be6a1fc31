"""``partgnn plan``: predict each rank's peak memory for a run config, before running it."""

from __future__ import annotations

import argparse
import dataclasses
import time

from partgnn import json_files
from partgnn.cli.arg_types import fraction, positive_float, positive_int

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
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.set_defaults(run=run_plan)


def run_plan(args: argparse.Namespace) -> int:
    from partgnn.data.storage import GraphFile
    from partgnn.distributed.device import resolve_device
    from partgnn.train.config_file import load_config
    from partgnn.train.footprint import Footprint
    from partgnn.train.memory_plan import (
        ItemSize,
        largest_event,
        measure_base_bytes,
        measure_cuda_context_bytes,
        plan_ranks,
        rank_shapes,
        ranks_needed,
    )
    from partgnn.train.precision import resolve_bf16

    config = load_config(args.config, args.set)
    graphs_path = _graphs_to_partition(config) if args.memory_gb is not None else None
    device = resolve_device(config.run.device, 0)
    shapes = rank_shapes(config)
    node_features, edge_features = _feature_widths(config)
    widths = (node_features, edge_features)
    started = time.perf_counter()
    footprint = _measure_footprint(config, widths, device)
    probe_seconds = time.perf_counter() - started
    base = measure_base_bytes() if device.type == "cpu" else measure_cuda_context_bytes(device)
    item_size = ItemSize.of(config, node_features, edge_features)

    def ranks_with(step: Footprint) -> list:
        return plan_ranks(shapes, step, base, config.data.cache_mb * MIB, item_size)

    ranks = ranks_with(footprint)
    peak = max(r.total_bytes for r in ranks)
    needed = choice = None
    method = _method(config)
    if args.memory_gb is not None and config.model.target is None:
        other = dataclasses.replace(
            config, model=dataclasses.replace(config.model, recompute=not config.model.recompute)
        )
        other_peak = max(
            r.total_bytes for r in ranks_with(_measure_footprint(other, widths, device))
        )
        choice = _recompute_choice(
            {config.model.recompute: peak, other.model.recompute: other_peak},
            args.memory_gb * 1e9, args.headroom,
        )  # fmt: skip
    if graphs_path is not None:
        with GraphFile(graphs_path) as graphs:
            needed = ranks_needed(
                graphs,
                largest_event(graphs),
                footprint,
                base,
                args.memory_gb * 1e9,
                item_size,
                method=method,
                max_parts=args.max_parts,
                headroom=args.headroom,
            )
    if args.json:
        print(
            json_files.dumps(
                {
                    "device": str(device),
                    "footprint": {
                        "per_edge_bytes": footprint.per_edge,
                        "per_node_bytes": footprint.per_node,
                        "constant_bytes": footprint.constant,
                        "resident_factor": footprint.resident_factor,
                        "released_factor": footprint.released_factor,
                    },
                    "ranks": [{**vars(r), "total_bytes": r.total_bytes} for r in ranks],
                    "peak_bytes": peak,
                    "ranks_needed": None
                    if needed is None
                    else {
                        "memory_gb": args.memory_gb,
                        "headroom": args.headroom,
                        "n_parts": needed.n_parts,
                    },
                    "recompute_choice": choice,
                },
                indent=2,
            )
        )
        return 0
    model = config.model
    what = (
        f"model {model.target}"
        if model.target
        else f"Interaction Network H = {model.hidden}, {model.steps} steps"
    )
    print(
        f"memory plan: mode {config.mode}, {len(shapes)} rank(s) per graph group, {what}, "
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
        f"probe graphs in {probe_seconds:.1f} s)"
    )
    if device.type == "cpu":
        print(f"process: {base / MIB:.0f} MiB (an idle partgnn process on this machine)")
    else:
        print("device memory only: the CUDA context (a few hundred MiB) comes on top")
    print()
    print(_table(ranks))
    print(f"\npredicted peak of the largest rank: {peak / MIB:.0f} MiB")
    if choice is not None:
        print(_choice_line(choice, args.memory_gb, args.headroom))
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


def _measure_footprint(config, widths: tuple[int, int], device):
    """:func:`~partgnn.train.footprint.measure_footprint` with torch on one thread, the caller's
    thread count restored after."""
    import torch

    from partgnn.train.footprint import measure_footprint

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return measure_footprint(config, *widths, device)
    finally:  # the command may run inside a longer process (the API, tests)
        torch.set_num_threads(threads)


def _recompute_choice(peaks: dict[bool, float], budget_bytes: float, headroom: float) -> dict:
    """Whether the run should recompute on devices of ``budget_bytes``, from the largest rank's
    peak with ``model.recompute`` off and on (:func:`~partgnn.train.memory_plan.choose_recompute`),
    with the peaks."""
    from partgnn.train.memory_plan import choose_recompute

    return {
        "peak_bytes": {"off": peaks[False], "on": peaks[True]},
        "recompute": choose_recompute(peaks, budget_bytes, headroom),
    }


def _choice_line(choice: dict, memory_gb: float, headroom: float) -> str:
    """One line: the recomputation setting for devices of ``memory_gb`` and why."""
    off, on = (choice["peak_bytes"][k] / MIB for k in ("off", "on"))
    sizes = f"largest rank {off:.0f} MiB without recomputation, {on:.0f} MiB with"
    kept = f"{headroom:.0%} of the prediction kept free"
    if choice["recompute"] is None:
        return (f"recomputation: neither setting fits {memory_gb:g} GB per rank at this world "
                f"size ({sizes}; {kept}): more ranks per graph")  # fmt: skip
    setting = "true" if choice["recompute"] else "false"
    why = "it fits without" if not choice["recompute"] else "it does not fit without"
    return (f"recomputation for {memory_gb:g} GB per rank: {'on' if choice['recompute'] else 'off'}"
            f" ({why}: {sizes}; {kept}): --set model.recompute={setting}")  # fmt: skip


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


def _feature_widths(config) -> tuple[int, int]:
    """Node and edge feature widths of the config's events."""
    from partgnn.data.storage import GraphFile
    from partgnn.partition.shard_reader import ShardDirectory

    if config.data.graphs:
        with GraphFile(config.data.graphs) as graphs:
            graph = graphs[0]
    else:
        with ShardDirectory(config.data.shards).open_rank(0) as shard:
            graph = shard[0].graph
    return int(graph.x.shape[1]), int(graph.edge_attr.shape[1])


def _graphs_to_partition(config) -> str:
    """The graphs file whose largest event ``--memory-gb`` partitions: the config's
    ``data.graphs``, else the one its shards were made from (recorded in their meta.json).

    Raises:
        InputError: Neither is there (one line saying what to set).
    """
    import os

    from partgnn.errors import InputError
    from partgnn.partition.shard_reader import ShardDirectory

    if config.data.graphs:
        return str(config.data.graphs)
    source = str(ShardDirectory(config.data.shards).meta["source"]["path"])
    if not os.path.isfile(source):
        raise InputError(
            f"{config.data.shards}: --memory-gb partitions the events the shards were made "
            f"from, {source}, which is not found: set data.graphs to that graphs file"
        )
    return source


def _method(config) -> str:
    """The partition method of the config's shards (METIS without shards)."""
    if not config.data.shards:
        return "metis"
    from partgnn.partition.shard_reader import ShardDirectory

    return str(ShardDirectory(config.data.shards).meta.get("method", "metis"))
