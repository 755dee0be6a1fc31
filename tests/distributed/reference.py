"""The model, loss and dtypes shared by the exactness workers and the single-process reference."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch_geometric.data import Data

from partgnn.cli.selfcheck import relative_error
from partgnn.models.compute_policy import ComputePolicy
from partgnn.models.interaction_network import InteractionNetwork
from partgnn.train.loss import edge_loss as train_edge_loss

__all__ = [
    "DTYPES",
    "TOLERANCE",
    "build_model",
    "edge_loss",
    "relative_error",
    "summed_over_ranks",
]

DTYPES = {"float64": torch.float64, "float32": torch.float32}
#: Relative error bounds of the issue: float64 1e-10, float32 1e-5.
TOLERANCE = {"float64": 1e-10, "float32": 1e-5}


#: The reference pipeline's architecture (acorn's InteractionGNN2): BatchNorm over the whole
#: graph, the initial encodings concatenated at every step, 3-layer MLPs, no residual.
REFERENCE_STYLE = {
    "batch_norm": True,
    "layer_norm": False,
    "concat_initial": True,
    "residual": False,
    "mlp_layers": 3,
    "aggregation": "sum",
}


def build_model(
    graph: Data,
    dtype: torch.dtype,
    *,
    checkpoint: bool,
    fused: bool = False,
    reference_style: bool = False,
) -> InteractionNetwork:
    """A 4-step Interaction Network with the same initial weights in every process
    (``reference_style``: with :data:`REFERENCE_STYLE`)."""
    torch.manual_seed(1234)
    settings = REFERENCE_STYLE if reference_style else {"aggregation": "sum_max"}
    model = InteractionNetwork(
        node_features=graph.x.shape[1],
        edge_features=graph.edge_attr.shape[1],
        hidden=16,
        steps=4,
        compute=ComputePolicy(recompute=checkpoint, fused=fused),
        **settings,
    )
    return model.to(dtype)


def edge_loss(logits: torch.Tensor, y: torch.Tensor, n_global_edges: int) -> torch.Tensor:
    """Weighted BCE (true edges x3) summed over the given edges, over the global edge count."""
    return train_edge_loss(logits, y, 3.0, max(n_global_edges, 1))


def summed_over_ranks(
    module: torch.nn.Module, loss: torch.Tensor, group: dist.ProcessGroup | None
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Every parameter gradient and the loss, each summed over the ranks of ``group``.

    A parameter without a gradient on a rank (unused there) counts as zeros.
    """
    grads = {}
    for name, parameter in module.named_parameters():
        grad = torch.zeros_like(parameter) if parameter.grad is None else parameter.grad.clone()
        dist.all_reduce(grad, group=group)
        grads[name] = grad
    total_loss = loss.detach().clone()
    dist.all_reduce(total_loss, group=group)
    return grads, total_loss
