"""Interaction Network edge classifier (Exa.TrkX style) that runs on a whole graph or a partition.

Inputs are first standardised (:class:`~partgnn.models.feature_scaler.FeatureScaler`, the
identity until the trainer fits it). Node and edge encoders lift the input features to
``hidden``; each of ``steps`` message-passing steps updates every edge from
``[h_src, h_dst, e]`` and every node from ``[h, sum of incoming e, sum of outgoing e]``, with
residual connections and LayerNorm; a head maps the final ``[h_src, h_dst, e]`` to edge logits.

On a partition the model keeps latents for its owned nodes only and, before each step, calls the
halo exchange to get current latents of its halo nodes. Edges that cross the cut are held by
both ranks and computed on both from identical inputs. With a whole graph the exchange is the
identity, so one class serves single-process and partitioned runs.

Glossary: ``h`` node latents (owned rows), ``h_local`` owned + halo rows, ``e`` edge latents,
``src``/``dst`` local source and target node indices of the edges.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint as activation_checkpoint
from torch_geometric.utils import scatter

from partgnn.models.feature_scaler import FeatureScaler
from partgnn.models.mlp import make_mlp

Aggregation = Literal["sum", "mean", "max", "sum_max"]
AGGREGATIONS: tuple[str, ...] = ("sum", "mean", "max", "sum_max")

#: ``x_owned -> [x_owned; x_halo]``; the identity on a whole graph.
Exchange = Callable[[torch.Tensor], torch.Tensor]


class InteractionNetwork(nn.Module):
    """Edge classifier: ``steps`` rounds of edge and node updates, then an edge head.

    Args:
        node_features: Width ``F_node`` of the node inputs.
        edge_features: Width ``F_edge`` of the edge inputs.
        hidden: Latent width ``H``.
        steps: Message-passing steps.
        mlp_layers: Linear layers per MLP.
        activation: Activation name (see :data:`partgnn.models.mlp.ACTIVATIONS`).
        aggregation: How incoming and outgoing edge latents are reduced at a node: ``sum``,
            ``mean``, ``max`` or ``sum_max`` (sum and max concatenated).
        shared_weights: One edge MLP and one node MLP for all steps (else one per step).
        residual: Add each update to the previous latent.
        layer_norm: LayerNorm in every MLP layer.
        checkpoint: Recompute each step in the backward pass (activation checkpointing) to
            save memory; the halo exchange inside a step is recomputed too.

    Shapes:
        - x: ``(N_local, F_node)``; rows ``[0, n_owned)`` are the owned nodes (all rows on a
          whole graph). Only owned rows are read.
        - edge_index: ``(2, E_local)`` local node indices; every edge touches an owned node.
        - edge_attr: ``(E_local, F_edge)``.
        - output: edge logits ``(E_local,)``.
    """

    def __init__(
        self,
        *,
        node_features: int,
        edge_features: int,
        hidden: int = 64,
        steps: int = 6,
        mlp_layers: int = 2,
        activation: str = "relu",
        aggregation: Aggregation = "sum",
        shared_weights: bool = False,
        residual: bool = True,
        layer_norm: bool = True,
        checkpoint: bool = False,
    ) -> None:
        super().__init__()
        if aggregation not in AGGREGATIONS:
            raise ValueError(
                f"unknown aggregation {aggregation!r} (choose {', '.join(AGGREGATIONS)})"
            )
        if steps < 1:
            raise ValueError(f"steps must be >= 1 (got {steps})")
        self.steps = steps
        self.aggregation = aggregation
        self.residual = residual
        self.checkpoint = checkpoint
        mlp = {"layers": mlp_layers, "activation": activation, "layer_norm": layer_norm}
        self.input_scaler = FeatureScaler(node_features, edge_features)
        self.node_encoder = make_mlp(node_features, hidden, hidden, **mlp)
        self.edge_encoder = make_mlp(edge_features, hidden, hidden, **mlp)
        n_reduced = 2 if aggregation == "sum_max" else 1
        n_mlps = 1 if shared_weights else steps
        self.edge_mlps = nn.ModuleList(
            make_mlp(3 * hidden, hidden, hidden, **mlp) for _ in range(n_mlps)
        )
        self.node_mlps = nn.ModuleList(
            make_mlp((1 + 2 * n_reduced) * hidden, hidden, hidden, **mlp) for _ in range(n_mlps)
        )
        self.edge_head = make_mlp(3 * hidden, hidden, 1, **mlp, output_activation=False)

    def forward(
        self,
        x: torch.Tensor,
        edge_index: torch.Tensor,
        edge_attr: torch.Tensor,
        *,
        exchange: Exchange | None = None,
        n_owned: int | None = None,
    ) -> torch.Tensor:
        """Computes edge logits.

        Args:
            x: Node features ``(N_local, F_node)``.
            edge_index: Local edges ``(2, E_local)``.
            edge_attr: Edge features ``(E_local, F_edge)``.
            exchange: The rank's halo exchange (``None`` on a whole graph).
            n_owned: Owned nodes (default: ``exchange.n_owned``, else all rows of ``x``).

        Returns:
            Logits ``(E_local,)``.
        """
        if n_owned is None:
            n_owned = getattr(exchange, "n_owned", x.shape[0])
        exchange = exchange or _identity
        x, edge_attr = self.input_scaler(x[:n_owned], edge_attr)
        h = self.node_encoder(x)
        e = self.edge_encoder(edge_attr)
        src, dst = edge_index
        for step in range(self.steps):
            if self.checkpoint and torch.is_grad_enabled():
                h, e = activation_checkpoint(
                    self._step, step, h, e, src, dst, exchange, use_reentrant=False
                )
            else:
                h, e = self._step(step, h, e, src, dst, exchange)
        # The head sees the final node latents of both endpoints: one more exchange.
        h_local = exchange(h)
        return self.edge_head(torch.cat([h_local[src], h_local[dst], e], dim=-1)).squeeze(-1)

    def _step(
        self,
        step: int,
        h: torch.Tensor,
        e: torch.Tensor,
        src: torch.Tensor,
        dst: torch.Tensor,
        exchange: Exchange,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        index = 0 if len(self.edge_mlps) == 1 else step
        h_local = exchange(h)
        edge_update = self.edge_mlps[index](torch.cat([h_local[src], h_local[dst], e], dim=-1))
        e = e + edge_update if self.residual else edge_update
        n_local = h_local.shape[0]
        # Every edge into or out of an owned node is local, so owned rows are complete.
        incoming = self._reduce(e, dst, n_local)[: h.shape[0]]
        outgoing = self._reduce(e, src, n_local)[: h.shape[0]]
        node_update = self.node_mlps[index](torch.cat([h, incoming, outgoing], dim=-1))
        h = h + node_update if self.residual else node_update
        return h, e

    def _reduce(self, e: torch.Tensor, index: torch.Tensor, n_nodes: int) -> torch.Tensor:
        if self.aggregation == "sum_max":
            return torch.cat(
                [
                    scatter(e, index, dim=0, dim_size=n_nodes, reduce="sum"),
                    scatter(e, index, dim=0, dim_size=n_nodes, reduce="max"),
                ],
                dim=-1,
            )
        return scatter(e, index, dim=0, dim_size=n_nodes, reduce=self.aggregation)


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x
