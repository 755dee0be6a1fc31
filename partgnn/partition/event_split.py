"""One event graph split for every rank of a partition (:class:`SplitEvent`): each rank's halo
plan, local subgraph, naive sector and kept fields as plain arrays, what a worker process hands
the shard writer (:mod:`partgnn.partition.shard_writer`); :func:`split_all` splits a graphs
file's events on one or more processes, in order."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from torch_geometric.data import Data

from partgnn.data.files.storage import GraphFile
from partgnn.data.graphs.graph_fields import EDGE_FIELDS, GRAPH_FIELDS, NODE_FIELDS
from partgnn.errors import InputError
from partgnn.partition.assign import METHODS, partition_graph
from partgnn.partition.halo_plan import build_halo_plans, validate_plans
from partgnn.partition.naive import extended_sector
from partgnn.partition.rank_event import PLAN_ARRAYS, SECTOR_ARRAYS
from partgnn.partition.statistics import (
    DEFAULT_HIDDEN,
    PartitionStatistics,
    partition_statistics,
)
from partgnn.worker_pool import ordered_map

#: Most parts one partition may have (a rank each; every shard file is open while writing).
MAX_PARTS = 4096


@dataclass(frozen=True)
class PartitionOptions:
    """How ``partgnn partition`` splits every event.

    Attributes:
        n_parts: Number of parts ``P`` (ranks of one graph-parallel group), >= 1.
        method: One of :data:`~partgnn.partition.assign.METHODS`.
        seed: Seed of the partitioner.
        grid: ``(n_phi, n_eta)`` sectors for ``method="phieta"`` (default: chosen from P).
        margin: Hops of the extended naive sector stored beside the plan (0: none stored; the
            naive sector is then the plan's owned nodes and interior edges).
        hidden: Hidden size used to quote bytes per exchange in the statistics.
    """

    n_parts: int
    method: str = "metis"
    seed: int = 0
    grid: tuple[int, int] | None = None
    margin: int = 0
    hidden: int = DEFAULT_HIDDEN

    def check(self) -> None:
        if self.n_parts < 1:
            raise InputError(f"parts must be >= 1 (got {self.n_parts})")
        if self.n_parts > MAX_PARTS:
            raise InputError(
                f"parts must be <= {MAX_PARTS} (got {self.n_parts}): one shard file and one "
                "rank per part"
            )
        if self.method not in METHODS:
            raise InputError(
                f"unknown partition method {self.method!r} (choose {', '.join(METHODS)})"
            )
        if self.margin < 0:
            raise InputError(f"margin must be >= 0 hops (got {self.margin})")


@dataclass(frozen=True)
class SplitEvent:
    """One event split for all ranks, as plain arrays: what a worker hands the writer.

    ``ranks[r]`` maps a dataset path inside the event group (``"x"``, ``"plan/send_index"``,
    ``"sector/edge_index"``...) to its array; ``group_attrs`` maps a group path (``""`` for
    the event group) to its attributes, the same for every rank except the sector's.
    """

    event_id: int
    ranks: list[dict[str, np.ndarray]]
    group_attrs: list[dict[str, dict[str, int]]]
    statistics: PartitionStatistics


def split_event(
    graph: Data, options: PartitionOptions, extra: dict[str, np.ndarray] | None = None
) -> SplitEvent:
    """Partitions one event graph, builds and validates every rank's plan, gathers its data:
    the graph's fields and the fields its file keeps beside it (``extra``: those of one number
    per node under ``extra/nodes/``, per edge under ``extra/edges/``, so a run can read them
    as inputs: :mod:`partgnn.data.graphs.input_features`)."""
    edge_index = graph.edge_index.numpy()
    assignment = partition_graph(
        graph, options.n_parts, options.method, seed=options.seed, grid=options.grid
    )
    plans = build_halo_plans(edge_index, assignment, options.n_parts)
    validate_plans(plans, edge_index, assignment)
    fields = {name: _field(graph, name) for name in (*NODE_FIELDS, *EDGE_FIELDS)}
    kept_nodes, kept_edges = kept_fields(extra or {}, graph.num_nodes, edge_index.shape[1])
    y = fields["y"]
    event_attrs = {
        "event_id": int(graph.event_id),
        "n_global_nodes": int(graph.num_nodes),
        "n_global_edges": int(edge_index.shape[1]),
        "n_global_true_edges": int((y > 0).sum()),
    }
    plan_attrs = {
        "n_global_nodes": int(graph.num_nodes),
        "n_global_edges": event_attrs["n_global_edges"],
    }
    ranks, group_attrs = [], []
    for plan in plans:
        arrays = _subgraph_arrays(fields, plan.local_nodes, plan.edge_ids, "")
        arrays.update(_kept_arrays(kept_nodes, kept_edges, plan.local_nodes, plan.edge_ids, ""))
        arrays.update({f"plan/{name}": getattr(plan, name) for name in PLAN_ARRAYS})
        arrays["edge_index"] = plan.edge_index
        arrays["edge_owned"] = plan.edge_owned.astype(np.uint8)
        attrs = {"": event_attrs, "plan": plan_attrs}
        if options.margin > 0:
            sector = extended_sector(
                edge_index, assignment, plan.rank, options.margin, options.n_parts
            )
            arrays.update(_subgraph_arrays(fields, sector.nodes, sector.edge_ids, "sector/"))
            arrays.update(
                _kept_arrays(kept_nodes, kept_edges, sector.nodes, sector.edge_ids, "sector/")
            )
            arrays.update({f"sector/{name}": getattr(sector, name) for name in SECTOR_ARRAYS})
            arrays["sector/edge_index"] = sector.edge_index
            arrays["sector/edge_owned"] = sector.edge_owned.astype(np.uint8)
            attrs["sector"] = {"n_owned": sector.n_owned}
        ranks.append(arrays)
        group_attrs.append(attrs)
    return SplitEvent(
        event_id=event_attrs["event_id"],
        ranks=ranks,
        group_attrs=group_attrs,
        statistics=partition_statistics(plans, edge_index, y),
    )


def split_all(
    graphs_path: Path, n_events: int, options: PartitionOptions, workers: int
) -> Iterator[SplitEvent]:
    tasks = ((graphs_path, index, options) for index in range(n_events))
    return ordered_map(_split_task, tasks, n_items=n_events, workers=workers)


_WORKER_GRAPHS: dict[Path, GraphFile] = {}


def _split_task(task: tuple[Path, int, PartitionOptions]) -> SplitEvent:
    graphs_path, index, options = task
    if graphs_path not in _WORKER_GRAPHS:
        _WORKER_GRAPHS[graphs_path] = GraphFile(graphs_path)
    graphs = _WORKER_GRAPHS[graphs_path]
    return split_event(graphs[index], options, graphs.extra(index))


def _subgraph_arrays(
    fields: dict[str, np.ndarray], nodes: np.ndarray, edges: np.ndarray, prefix: str
) -> dict[str, np.ndarray]:
    arrays = {f"{prefix}{name}": fields[name][nodes] for name in NODE_FIELDS}
    arrays.update({f"{prefix}{name}": fields[name][edges] for name in EDGE_FIELDS})
    return arrays


def kept_fields(
    extra: dict[str, np.ndarray], n_nodes: int, n_edges: int
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The kept fields of one number per node, and per edge (a field of as many values as
    both is in both; fields of other shapes are not carried into shards)."""
    numbers = {
        name: np.asarray(values) for name, values in extra.items()
        if np.asarray(values).ndim == 1 and np.issubdtype(np.asarray(values).dtype, np.number)
    }  # fmt: skip
    nodes = {name: values for name, values in numbers.items() if values.shape[0] == n_nodes}
    edges = {name: values for name, values in numbers.items() if values.shape[0] == n_edges}
    return nodes, edges


def _kept_arrays(
    nodes: dict[str, np.ndarray],
    edges: dict[str, np.ndarray],
    node_ids: np.ndarray,
    edge_ids: np.ndarray,
    prefix: str,
) -> dict[str, np.ndarray]:
    arrays = {f"{prefix}extra/nodes/{name}": values[node_ids] for name, values in nodes.items()}
    arrays.update(
        {f"{prefix}extra/edges/{name}": values[edge_ids] for name, values in edges.items()}
    )
    return arrays


def _field(graph: Data, name: str) -> np.ndarray:
    return graph[name].numpy().astype(GRAPH_FIELDS[name], copy=False)
