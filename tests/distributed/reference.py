"""The model, loss and dtypes shared by the exactness workers and the single-process reference."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch_geometric.data import Data

from partgnn.distributed.selfcheck import relative_error
from partgnn.models.interaction_network import InteractionNetwork

__all__ = ["DTYPES", "TOLERANCE", "build_model", "edge_loss", "relative_error"]

DTYPES = {"float64": torch.float64, "float32": torch.float32}
#: Relative error bounds of the issue: float64 1e-10, float32 1e-5.
TOLERANCE = {"float64": 1e-10, "float32": 1e-5}


def build_model(graph: Data, dtype: torch.dtype, *, checkpoint: bool) -> InteractionNetwork:
    """A 4-step Interaction Network with the same initial weights in every process."""
    torch.manual_seed(1234)
    model = InteractionNetwork(
        node_features=graph.x.shape[1],
        edge_features=graph.edge_attr.shape[1],
        hidden=16,
        steps=4,
        aggregation="sum_max",
        checkpoint=checkpoint,
    )
    return model.to(dtype)


def edge_loss(logits: torch.Tensor, y: torch.Tensor, n_global_edges: int) -> torch.Tensor:
    """Weighted BCE summed over the given edges, divided by the event's global edge count."""
    weight = 1.0 + 2.0 * y
    return F.binary_cross_entropy_with_logits(logits, y, weight=weight, reduction="sum") / max(
        n_global_edges, 1
    )
