"""Fitting the input standardisation on the training events (mean and spread per feature).

Each rank sums, in float64, the count, sum and sum of squares of every feature over the rows it
*counts*: owned nodes and owned edges of a shard (halo mode), the sector's own nodes and edges
(naive mode), whole graphs (full and ddp). In halo mode the ranks of a group hold disjoint
owned rows, so the sums reduced over the group are the whole events' sums and the statistics
equal those of a full-graph run up to float64 rounding.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from partgnn import json_files
from partgnn.data.files.output_files import atomic_output
from partgnn.data.graphs.graph_config import feature_names
from partgnn.errors import InputError
from partgnn.models.input_scaler import InputScaler
from partgnn.train.items.train_item import TrainItem

#: Name of the statistics file in a run directory.
SCALER_FILE = "input_scaler.json"


@dataclass(frozen=True)
class InputStatistics:
    """Mean and standard deviation of each node and edge feature over the training rows.

    Attributes:
        node_mean, node_std: ``(F_node,)`` float64.
        edge_mean, edge_std: ``(F_edge,)`` float64.
        n_nodes, n_edges: Rows the statistics were computed over.
    """

    node_mean: torch.Tensor
    node_std: torch.Tensor
    edge_mean: torch.Tensor
    edge_std: torch.Tensor
    n_nodes: int
    n_edges: int

    def apply_to(self, scaler: InputScaler) -> None:
        """Sets ``scaler``'s buffers to these statistics."""
        scaler.set_statistics(self.node_mean, self.node_std, self.edge_mean, self.edge_std)

    def to_dict(self) -> dict[str, object]:
        """Plain values, for ``input_scaler.json``."""
        return {
            "n_nodes": self.n_nodes,
            "n_edges": self.n_edges,
            "node_mean": self.node_mean.tolist(),
            "node_std": self.node_std.tolist(),
            "edge_mean": self.edge_mean.tolist(),
            "edge_std": self.edge_std.tolist(),
        }


def fit_feature_statistics(
    items: Iterable[TrainItem],
    *,
    group: dist.ProcessGroup | None = None,
    reduce: bool = False,
) -> InputStatistics:
    """Feature means and standard deviations over the counted rows of ``items``.

    Args:
        items: The training events as this rank holds them.
        group: Process group whose ranks' sums are added (with ``reduce``).
        reduce: All-reduce the sums over ``group`` (every rank of it must call this).

    Raises:
        InputError: If there are no rows to fit on.
    """
    sums: torch.Tensor | None = None
    widths = (0, 0)
    for item in items:
        x = item.owned_features().to(torch.float64)
        e = item.edge_attr[item.counted].to(torch.float64)
        widths = (x.shape[1], e.shape[1])
        row = torch.cat(
            [
                torch.tensor([x.shape[0]], dtype=torch.float64, device=x.device),
                x.sum(0),
                (x * x).sum(0),
                torch.tensor([e.shape[0]], dtype=torch.float64, device=x.device),
                e.sum(0),
                (e * e).sum(0),
            ]
        )
        sums = row if sums is None else sums + row
    if sums is None:
        raise InputError("feature standardisation: no training events to fit on")
    if reduce:
        dist.all_reduce(sums, group=group)
    sums = sums.cpu()
    f_node, f_edge = widths
    n_nodes, node_sum, node_sq = sums[0], sums[1 : 1 + f_node], sums[1 + f_node : 1 + 2 * f_node]
    start = 1 + 2 * f_node
    n_edges = sums[start]
    edge_sum = sums[start + 1 : start + 1 + f_edge]
    edge_sq = sums[start + 1 + f_edge : start + 1 + 2 * f_edge]
    if n_nodes == 0 or n_edges == 0:
        raise InputError("feature standardisation: the training events have no nodes or edges")
    node_mean, edge_mean = node_sum / n_nodes, edge_sum / n_edges
    return InputStatistics(
        node_mean=node_mean,
        node_std=(node_sq / n_nodes - node_mean**2).clamp(min=0).sqrt(),
        edge_mean=edge_mean,
        edge_std=(edge_sq / n_edges - edge_mean**2).clamp(min=0).sqrt(),
        n_nodes=int(n_nodes),
        n_edges=int(n_edges),
    )


def standardise_inputs(
    model: torch.nn.Module,
    items: Iterable[TrainItem],
    *,
    group: dist.ProcessGroup | None = None,
    reduce: bool = False,
) -> InputStatistics:
    """Fits the feature statistics of the training ``items`` (:func:`fit_feature_statistics`)
    and sets them in ``model``'s input scaler, if it has one (a model of one's own may take raw
    inputs)."""
    statistics = fit_feature_statistics(items, group=group, reduce=reduce)
    scaler = getattr(model, "input_scaler", None)
    if scaler is not None:
        statistics.apply_to(scaler)
    return statistics


def write_feature_statistics(run_dir: Path, statistics: InputStatistics) -> Path:
    """Writes ``run_dir/input_scaler.json`` (atomically): names, means and spreads.

    The column names follow from the widths
    (:func:`~partgnn.data.graphs.graph_builder.feature_names`).
    """
    node_names, edge_names = feature_names(
        statistics.node_mean.numel(), statistics.edge_mean.numel()
    )
    record = {
        "node_features": list(node_names),
        "edge_features": list(edge_names),
        **statistics.to_dict(),
    }
    path = run_dir / SCALER_FILE
    with atomic_output(path) as tmp:
        tmp.write_text(json_files.dumps(record, indent=2) + "\n")
    return path
