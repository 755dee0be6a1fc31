"""One event as one rank's shard holds it (:class:`RankEvent`): its halo plan, its local subgraph,
its naive sector and the fields kept beside the graph, read from the event's group of a shard file
(:mod:`partgnn.partition.shard_reader`) and checked against each other, a bad one refused in one
line naming the file and the event."""

from __future__ import annotations

from dataclasses import dataclass, field

import h5py
import numpy as np
import torch
from torch_geometric.data import Data

from partgnn.data.files.h5_files import read_array
from partgnn.data.graphs.graph_fields import EDGE_FIELDS, NODE_FIELDS, check_graph
from partgnn.errors import InputError
from partgnn.partition.halo_plan import HaloPlan, InvalidPlanError

#: The arrays of a rank's halo plan, as a shard file holds them in its event's ``plan`` group.
PLAN_ARRAYS = ("owned_nodes", "halo_nodes", "halo_counts", "edge_ids", "send_index", "send_counts")
#: The arrays of a rank's naive sector (its ``sector`` group).
SECTOR_ARRAYS = ("nodes", "edge_ids")


@dataclass(frozen=True)
class RankEvent:
    """One event as one rank sees it.

    Attributes:
        event_id: The event id.
        plan: The rank's halo plan.
        graph: The rank's local graph: node fields of its local nodes (owned, then halo), edge
            fields and local ``edge_index`` of its local edges, ``event_id``.
        sector: The extended naive sector graph (same fields) if the shards hold one, with
            ``edge_owned`` and ``n_owned``; else ``None`` (use the plan's interior edges).
        n_global_nodes: Nodes of the whole event graph.
        n_global_edges: Edges of the whole event graph (a loss normaliser).
        n_global_true_edges: True edges of the whole event graph (a loss normaliser).
        kept: The fields the graphs file kept beside the event, of ``graph``'s nodes and edges
            (:class:`KeptFields`).
        sector_kept: The same of ``sector``'s (``None`` without a sector).
    """

    event_id: int
    plan: HaloPlan
    graph: Data
    sector: Data | None
    n_global_nodes: int
    n_global_edges: int
    n_global_true_edges: int
    kept: KeptFields = field(default_factory=lambda: KeptFields({}, {}))
    sector_kept: KeptFields | None = None


@dataclass(frozen=True)
class KeptFields:
    """Fields a graphs file kept beside an event graph (an acorn file's), split by rows.

    Attributes:
        nodes: Name -> one value per node of the (local) graph.
        edges: Name -> one value per edge.
    """

    nodes: dict[str, np.ndarray]
    edges: dict[str, np.ndarray]


def read_rank_event(group: h5py.Group, rank: int, where: str) -> RankEvent:
    """One rank's event, its arrays checksum-verified and its plan and labels range-checked
    (a corruption that passed a checksum must not index out of an array)."""
    plan_group = group["plan"]
    arrays = {name: read_array(plan_group, name) for name in PLAN_ARRAYS}
    edge_index = read_array(group, "edge_index")
    edge_owned = read_array(group, "edge_owned").astype(bool)
    plan = HaloPlan(
        rank=rank,
        n_parts=int(arrays["halo_counts"].shape[0]),
        n_global_nodes=int(plan_group.attrs["n_global_nodes"]),
        n_global_edges=int(plan_group.attrs["n_global_edges"]),
        edge_index=edge_index,
        edge_owned=edge_owned,
        **arrays,
    )
    try:
        plan.validate()
    except InvalidPlanError as err:
        raise InputError(f"{where}: {err}") from None
    event_id = int(group.attrs["event_id"])
    graph = _read_subgraph(group, edge_index, event_id, where)
    if graph.x.shape[0] != plan.n_local_nodes or any(
        graph[name].shape[0] != plan.n_local_edges for name in EDGE_FIELDS
    ):
        raise InputError(f"{where}: node or edge fields do not match the plan's sizes")
    kept = _read_kept(group, plan.n_local_nodes, plan.n_local_edges, where)
    sector = sector_kept = None
    if "sector" in group:
        sector_group = group["sector"]
        sector_where = f"{where}/sector"
        sector = _read_subgraph(
            sector_group, read_array(sector_group, "edge_index"), event_id, sector_where
        )
        sector.edge_owned = torch.from_numpy(read_array(sector_group, "edge_owned").astype(bool))
        sector.n_owned = int(sector_group.attrs["n_owned"])
        sector.global_nodes = torch.from_numpy(read_array(sector_group, "nodes"))
        sector.global_edges = torch.from_numpy(read_array(sector_group, "edge_ids"))
        sector_kept = _read_kept(
            sector_group, sector.num_nodes, sector.edge_index.shape[1], sector_where
        )
    return RankEvent(
        event_id=event_id,
        plan=plan,
        graph=graph,
        sector=sector,
        n_global_nodes=int(group.attrs["n_global_nodes"]),
        n_global_edges=int(group.attrs["n_global_edges"]),
        n_global_true_edges=int(group.attrs["n_global_true_edges"]),
        kept=kept,
        sector_kept=sector_kept,
    )


def _read_kept(group: h5py.Group, n_nodes: int, n_edges: int, where: str) -> KeptFields:
    """The kept fields of a shard's (halo or sector) graph, their lengths checked."""
    fields = {}
    for rows, expected in (("nodes", n_nodes), ("edges", n_edges)):
        kept = group.get(f"extra/{rows}")
        fields[rows] = {} if kept is None else {name: read_array(kept, name) for name in kept}
        wrong = [name for name, values in fields[rows].items() if values.shape != (expected,)]
        if wrong:
            raise InputError(
                f"{where}: kept field {wrong[0]} does not have one value per {rows[:-1]}"
            )
    return KeptFields(fields["nodes"], fields["edges"])


def _read_subgraph(group: h5py.Group, edge_index: np.ndarray, event_id: int, where: str) -> Data:
    """A shard's (halo or sector) graph, its fields checked as a whole graph's are
    (:func:`~partgnn.data.graphs.graph_fields.check_graph`: shapes, node indices, finite features,
    labels)."""
    fields = {
        name: torch.from_numpy(read_array(group, name)) for name in (*NODE_FIELDS, *EDGE_FIELDS)
    }
    fields["y"] = fields["y"].to(torch.float32)
    graph = Data(edge_index=torch.from_numpy(edge_index), event_id=event_id, **fields)
    graph.num_nodes = fields["x"].shape[0]
    check_graph(graph, where=where)
    return graph
