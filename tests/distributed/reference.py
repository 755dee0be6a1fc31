"""The model, loss and dtypes shared by the exactness workers and the single-process reference."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch_geometric.data import Data

from partgnn.models.compute_policy import ComputePolicy
from partgnn.models.interaction_network import InteractionNetwork
from partgnn.train.loss import edge_loss as train_edge_loss
from partgnn.workflows.selfcheck import relative_error

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

    A parameter without a gradient on a rank (unused there) counts as zeros. One all-reduce per
    dtype, of the gradients and the loss flattened into one buffer: one per parameter was 20 s of
    a 28 s exactness run on 4 ranks (a round of messages each, 48 cases of about 100 parameters).
    """
    names = [name for name, _ in module.named_parameters()]
    tensors = [
        torch.zeros_like(parameter) if parameter.grad is None else parameter.grad
        for parameter in module.parameters()
    ]
    tensors.append(loss.detach())
    summed: list[torch.Tensor] = list(tensors)
    by_dtype: dict[torch.dtype, list[int]] = {}
    for index, tensor in enumerate(tensors):
        by_dtype.setdefault(tensor.dtype, []).append(index)
    for indices in by_dtype.values():
        flat = torch.cat([tensors[index].reshape(-1) for index in indices])
        dist.all_reduce(flat, group=group)
        pieces = flat.split([tensors[index].numel() for index in indices])
        for index, piece in zip(indices, pieces, strict=True):
            summed[index] = piece.view_as(tensors[index])
    return dict(zip(names, summed[:-1], strict=True)), summed[-1]
