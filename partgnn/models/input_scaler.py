"""Per-feature standardisation of node and edge inputs, carried inside the model.

The input features of tracking graphs live on very different scales (``dphi`` has a standard
deviation of ~0.03, ``eta`` ~2.2): fed as they are into ``Linear + LayerNorm``, the separating
ones are drowned. :class:`InputScaler` maps each column to ``(value - mean) / std`` with
statistics fitted on the training events (:mod:`partgnn.train.items.standardisation`). The
statistics are buffers, so they are saved in every checkpoint and applied identically at inference.
"""

from __future__ import annotations

import torch
from torch import nn


class InputScaler(nn.Module):
    """Standardises node and edge features column by column; the identity until fitted.

    Args:
        node_features: Width ``F_node`` of the node inputs.
        edge_features: Width ``F_edge`` of the edge inputs.

    Shapes:
        - x: ``(N, F_node)`` -> ``(N, F_node)``.
        - edge_attr: ``(E, F_edge)`` -> ``(E, F_edge)``.
    """

    def __init__(self, node_features: int, edge_features: int) -> None:
        super().__init__()
        self.register_buffer("node_mean", torch.zeros(node_features))
        self.register_buffer("node_std", torch.ones(node_features))
        self.register_buffer("edge_mean", torch.zeros(edge_features))
        self.register_buffer("edge_std", torch.ones(edge_features))

    @torch.no_grad()
    def set_statistics(
        self,
        node_mean: torch.Tensor,
        node_std: torch.Tensor,
        edge_mean: torch.Tensor,
        edge_std: torch.Tensor,
    ) -> None:
        """Sets the statistics; a column with zero spread is only centred (std taken as 1).

        Raises:
            ValueError: If a statistic has the wrong width or is not finite.
        """
        values = {
            "node_mean": node_mean,
            "node_std": node_std,
            "edge_mean": edge_mean,
            "edge_std": edge_std,
        }
        for name, value in values.items():
            buffer = getattr(self, name)
            value = torch.as_tensor(value, dtype=torch.float64).reshape(-1)
            if value.shape != buffer.shape:
                raise ValueError(f"{name} has {value.numel()} values for {buffer.numel()} features")
            if not torch.isfinite(value).all():
                raise ValueError(f"{name} holds NaN or inf")
            if name.endswith("_std"):
                value = torch.where(value > 0, value, torch.ones_like(value))
            buffer.copy_(value.to(buffer.dtype))

    def forward(
        self, x: torch.Tensor, edge_attr: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns the standardised ``(x, edge_attr)``."""
        return (x - self.node_mean) / self.node_std, (edge_attr - self.edge_mean) / self.edge_std
