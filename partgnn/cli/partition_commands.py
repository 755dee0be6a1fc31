"""Partition-stage sub-commands: ``partition`` (write shards) and ``inspect`` (read them)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

# Light imports only (numpy): torch, PyG and matplotlib load when a command runs.
from partgnn.cli.arg_types import non_negative_int, positive_int, seed
from partgnn.cli.output_guard import add_overwrite_option
from partgnn.data.files import output_kinds
from partgnn.errors import InputError
from partgnn.partition.assign import METHODS
from partgnn.partition.statistics import DEFAULT_HIDDEN

if TYPE_CHECKING:
    import numpy as np

    from partgnn.partition.shard_meta import EventPartition, ShardMeta
    from partgnn.partition.shard_reader import ShardDirectory


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``partition`` and ``inspect`` to the ``partgnn`` parser."""
    partition = subparsers.add_parser(
        "partition", help="split every event graph into P parts: one shard file per rank"
    )
    partition.add_argument("graphs", type=Path, help="graphs file from build-graphs")
    partition.add_argument("--parts", type=positive_int, required=True, help="number of parts P")
    partition.add_argument("--method", choices=METHODS, default="metis")
    partition.add_argument("--out", type=Path, required=True, help="output shard directory")
    partition.add_argument("--seed", type=seed, default=0, help="partitioner seed")
    partition.add_argument("--grid", type=_grid, default=None, help="phieta sectors, e.g. 4x2")
    partition.add_argument(
        "--margin",
        type=non_negative_int,
        default=0,
        help="also store extended naive sectors of K hops",
    )
    partition.add_argument(
        "--workers", type=positive_int, default=1, help="processes splitting events"
    )
    partition.add_argument(
        "--hidden", type=positive_int, default=DEFAULT_HIDDEN, help="hidden size for bytes/exchange"
    )
    partition.set_defaults(run=run_partition, output_folder=True)

    inspect = subparsers.add_parser("inspect", help="print partition statistics, draw an event")
    inspect.add_argument("directory", type=Path, help="shard directory from partition")
    inspect.add_argument("--event", type=int, default=None, help="event id (default: first)")
    inspect.add_argument(
        "--plot", type=Path, default=None,
        help="write x-y and r-z views (.png; .pdf and .svg also work)",
    )  # fmt: skip
    add_overwrite_option(inspect, output_kinds.PLOT, option="plot")
    inspect.set_defaults(run=run_inspect)


def run_partition(args: argparse.Namespace) -> int:
    from partgnn.partition.event_split import PartitionOptions
    from partgnn.partition.shard_writer import check_parts_fit, write_shards

    options = PartitionOptions(
        n_parts=args.parts,
        method=args.method,
        seed=args.seed,
        grid=args.grid,
        margin=args.margin,
        hidden=args.hidden,
    )
    options.check()
    check_parts_fit(args.graphs, options.n_parts)
    meta = write_shards(args.graphs, args.out, options, workers=args.workers)
    warning = empty_parts_warning(meta)
    if warning is not None:
        print(f"partgnn: warning: {warning}", file=sys.stderr)
    _print_summary(meta)
    print(f"wrote {options.n_parts} shards of {len(meta.event_ids)} events -> {args.out}")
    return 0


def empty_parts_warning(meta: ShardMeta) -> str | None:
    """What to say when the partition left parts without nodes (their ranks idle), or None."""
    per_event = meta.per_event
    empty = [(row.event_id, row.owned_nodes.count(0)) for row in per_event]
    empty = [(event_id, count) for event_id, count in empty if count]
    if not empty:
        return None
    event_id, count = max(empty, key=lambda item: item[1])
    return (
        f"{len(empty)} of {len(per_event)} events leave parts without nodes (event {event_id}: "
        f"{count} of {meta.n_parts} parts empty); their ranks idle on those events - "
        "use fewer parts"
    )


def run_inspect(args: argparse.Namespace) -> int:
    from partgnn.partition.plot import plot_partition
    from partgnn.partition.shard_reader import ShardDirectory

    if args.plot is not None:  # (before anything is printed)
        check_plot_path(args.plot)
    shards = ShardDirectory(args.directory)
    meta = shards.meta
    for rank in range(shards.n_parts):  # every part file there, of this partition run
        with shards.open_rank(rank):
            pass
    event_ids = list(meta.event_ids)
    event_id = event_ids[0] if args.event is None and event_ids else args.event
    if event_id not in event_ids:
        raise InputError(f"{args.directory}: no event {event_id} (events: {_ids(event_ids)})")
    _print_summary(meta)
    per_event = {row.event_id: row for row in meta.per_event}
    _print_ranks(per_event[event_id])
    if args.plot is not None:
        pos, assignment, edge_index = _gather_event(shards, event_ids.index(event_id))
        title = f"event {event_id}: {meta.method}, P = {meta.n_parts}"
        plot_partition(pos, assignment, edge_index, args.plot, title=title)
        print(f"plot -> {args.plot}")
    return 0


def check_plot_path(path: Path) -> None:
    """Refuses a plot path whose suffix names no format partgnn's plots are written in.

    Raises:
        InputError: One line naming the path and the formats.
    """
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in output_kinds.PLOT_FORMATS:
        formats = ", ".join("." + name for name in output_kinds.PLOT_FORMATS)
        raise InputError(f"{path}: a plot is written as {formats}; name the file so")


def _gather_event(shards: ShardDirectory, index: int) -> tuple[np.ndarray, ...]:
    """Rebuilds one event's global positions, assignment and edges from all ranks' shards."""
    import numpy as np

    parts = []
    for rank in range(shards.n_parts):
        with shards.open_rank(rank) as shard:
            parts.append(shard[index])
    n_nodes = parts[0].n_global_nodes
    pos = np.zeros((n_nodes, 3), dtype=np.float32)
    assignment = np.zeros(n_nodes, dtype=np.int64)
    edge_index = np.zeros((2, parts[0].n_global_edges), dtype=np.int64)
    for part in parts:
        plan = part.plan
        pos[plan.owned_nodes] = part.graph.pos[: plan.n_owned].numpy()
        assignment[plan.owned_nodes] = plan.rank
        edge_index[:, plan.edge_ids] = plan.local_nodes[plan.edge_index]
    return pos, assignment, edge_index


def _number(value: float, spec: str) -> str:
    """``value`` formatted, or ``n/a`` where it is undefined (no edges to cut)."""
    return "n/a" if math.isnan(value) else format(value, spec)


def _print_summary(meta: ShardMeta) -> None:
    summary = meta.summary
    n_events = 0 if summary is None else summary.events
    print(f"method {meta.method}, P = {meta.n_parts}, {n_events} events, source {meta.source.path}")
    if summary is None or not summary.events:
        return
    rows = [
        ("edge cut fraction", _number(summary.edge_cut_fraction, ".4f")),
        (
            "true-edge cut fraction (lost by naive)",
            _number(summary.true_edge_cut_fraction, ".4f"),
        ),
        ("halo / owned nodes, mean over ranks", _number(summary.halo_ratio_mean, ".4f")),
        ("halo / owned nodes, worst rank", _number(summary.halo_ratio_max, ".4f")),
        ("node imbalance (max / mean)", _number(summary.node_imbalance, ".4f")),
        ("edge imbalance (max / mean local edges)", _number(summary.edge_imbalance, ".4f")),
        # n/a also in shards written before partgnn recorded it
        ("work imbalance (edges, owned and halo nodes)", _number(summary.work_imbalance, ".4f")),
        ("neighbour ranks, worst rank", _number(summary.neighbours_max, ".1f")),
        (
            f"bytes per exchange, all ranks (H = {summary.hidden}, float32)",
            _number(summary.bytes_per_exchange_total, ",.0f"),
        ),
    ]
    width = max(len(name) for name, _ in rows)
    print("mean over events:")
    for name, value in rows:
        print(f"  {name:<{width}}  {value:>12}")


def _print_ranks(row: EventPartition) -> None:
    print(f"event {row.event_id}: {row.n_nodes:,} nodes, {row.n_edges:,} edges")
    print(
        f"  {'rank':>4} {'owned':>9} {'halo':>8} {'halo/own':>8} {'edges':>10} "
        f"{'peers':>5} {'send rows':>9} {'bytes/exch':>11}"
    )
    for rank in range(row.n_parts):
        print(
            f"  {rank:>4} {row.owned_nodes[rank]:>9,} {row.halo_nodes[rank]:>8,} "
            f"{row.halo_ratio[rank]:>8.3f} {row.local_edges[rank]:>10,} "
            f"{row.neighbours[rank]:>5} {row.send_rows[rank]:>9,} "
            f"{row.bytes_per_exchange[rank]:>11,}"
        )


def _ids(event_ids: list[int]) -> str:
    shown = ", ".join(map(str, event_ids[:8]))
    return shown + (", ..." if len(event_ids) > 8 else "")


def _grid(text: str) -> tuple[int, int]:
    try:
        n_phi, n_eta = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected PHIxETA like 4x2 (got {text!r})") from None
    if n_phi < 1 or n_eta < 1:
        raise argparse.ArgumentTypeError(f"grid counts must be >= 1 (got {text!r})")
    return n_phi, n_eta
