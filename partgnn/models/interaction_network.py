"""Interaction Network edge classifier (Exa.TrkX style) that runs on a whole graph or a partition.

Inputs are first standardised (:class:`~partgnn.models.input_scaler.InputScaler`, the
identity until the trainer fits it). Node and edge encoders lift the input features to
``hidden``; each of ``steps`` message-passing steps updates every edge from
``[h_src, h_dst, e]`` and every node from ``[h, sum of incoming e, sum of outgoing e]``, with
residual connections and LayerNorm; a head maps the final ``[h_src, h_dst, e]`` to edge logits.
The reference pipeline's variant (acorn's InteractionGNN2) is a matter of options: BatchNorm over
the whole graph's rows instead of LayerNorm (``batch_norm``; statistics summed over the ranks of
the group, :mod:`partgnn.models.graph_batch_norm`), the initial encodings beside the latents at
every step (``concat_initial``), 3-layer MLPs, ReLU, no residual.

On a partition the model keeps latents for its owned nodes only and, before each step, calls the
halo exchange to get current latents of its halo nodes. Edges that cross the cut are held by
both ranks and computed on both from identical inputs. With a whole graph the exchange is the
identity, so one class serves single-process and partitioned runs.

Memory (docs/history/training.md, "Lean memory"): first layers on ``[a, b, c]`` are
split by block, so node latents are projected once per node and gathered per edge instead of
concatenated ``E x 3H``; what is kept for the backward pass is chosen in
:mod:`partgnn.models.lean_mlp`, :mod:`partgnn.models.chunked_edge_mlp` (which also overlaps
the halo exchange with the interior edges) and :mod:`partgnn.models.edge_aggregation`. Results
equal the plain formulation up to float rounding (tests/models/test_interaction_network.py).

Glossary: ``h`` node latents (owned rows), ``h_local`` owned + halo rows, ``e`` edge latents,
``src``/``dst`` local source and target node indices of the edges.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint as activation_checkpoint

from partgnn.distributed.exchange import Exchange
from partgnn.distributed.in_process_exchanges import NoExchange
from partgnn.distributed.interior_first import InteriorFirst
from partgnn.models.chunked_edge_mlp import EdgeNodes, edge_mlp
from partgnn.models.compute_policy import ComputePolicy
from partgnn.models.config import Architecture
from partgnn.models.edge_aggregation import AGGREGATIONS, aggregate_both_ways
from partgnn.models.graph_batch_norm import GroupStatistics
from partgnn.models.graph_batch_norm import statistics as graph_statistics
from partgnn.models.input_scaler import InputScaler
from partgnn.models.lean_mlp import block_mlp
from partgnn.models.local_graph import LocalGraph, joined_regions
from partgnn.models.mlp import make_mlp
from partgnn.models.node_sums import Incidence
from partgnn.models.replayed_exchange import ReplayedExchange

#: ``x_owned -> [x_owned; x_halo]``; the identity on a whole graph.

#: With recomputation, the latents of every this many message-passing steps are kept.
STEPS_PER_REGION = 2


class InteractionNetwork(nn.Module):
    """Edge classifier: ``steps`` rounds of edge and node updates, then an edge head.

    Args:
        node_features: Width ``F_node`` of the node inputs.
        edge_features: Width ``F_edge`` of the edge inputs.
        architecture: What it computes (:class:`~partgnn.models.config.Architecture`: hidden
            width, steps, MLP depth, activation, aggregation, shared weights, residual,
            LayerNorm); default the architecture's defaults.
        compute: How it computes (:class:`~partgnn.models.compute_policy.ComputePolicy`:
            recomputation, fused CPU kernels, heap release); the same function either way.
        **settings: Architecture fields that replace ``architecture``'s
            (``InteractionNetwork(node_features=4, edge_features=2, hidden=32)``).

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
        architecture: Architecture | None = None,
        compute: ComputePolicy | None = None,
        **settings: Any,
    ) -> None:
        super().__init__()
        architecture = dataclasses.replace(architecture or Architecture(), **settings)
        hidden, steps = architecture.hidden, architecture.steps
        aggregation = architecture.aggregation
        if aggregation not in AGGREGATIONS:
            raise ValueError(
                f"unknown aggregation {aggregation!r} (choose {', '.join(AGGREGATIONS)})"
            )
        if steps < 1:
            raise ValueError(f"steps must be >= 1 (got {steps})")
        self.architecture = architecture
        self.compute = compute or ComputePolicy()
        self.steps = steps
        self.aggregation = aggregation
        self.residual = architecture.residual
        mlp = {
            "layers": architecture.mlp_layers,
            "activation": architecture.activation,
            "layer_norm": architecture.layer_norm,
        }
        if architecture.batch_norm and architecture.layer_norm:
            raise ValueError("batch_norm needs layer_norm: false (one norm per MLP layer)")
        # BatchNorm needs every edge's row before any is normalised, and the initial encodings
        # whole: such models compute their edges unchunked (regions of steps still recomputed).
        self.chunkable = not (architecture.batch_norm or architecture.concat_initial)
        edges, nodes = mlp, dict(mlp)
        if architecture.batch_norm:
            edges, nodes = {**mlp, "batch_norm": "edges"}, {**mlp, "batch_norm": "nodes"}
        width = 2 * hidden if architecture.concat_initial else hidden
        self.input_scaler = InputScaler(node_features, edge_features)
        self.node_encoder = make_mlp(node_features, hidden, hidden, **nodes)
        self.edge_encoder = make_mlp(edge_features, hidden, hidden, **edges)
        n_reduced = 2 if aggregation == "sum_max" else 1
        n_mlps = 1 if architecture.shared_weights else steps
        self.edge_mlps = nn.ModuleList(
            make_mlp(3 * width, hidden, hidden, **edges) for _ in range(n_mlps)
        )
        self.node_mlps = nn.ModuleList(
            make_mlp(width + 2 * n_reduced * hidden, hidden, hidden, **nodes) for _ in range(n_mlps)
        )
        self.edge_head = make_mlp(3 * hidden, hidden, 1, **edges, output_activation=False)

    def forward(
        self,
        x: torch.Tensor,
        edge_index: torch.Tensor,
        edge_attr: torch.Tensor,
        *,
        exchange: Exchange | None = None,
        n_owned: int | None = None,
        edge_order: InteriorFirst | None = None,
    ) -> torch.Tensor:
        """Computes edge logits.

        Args:
            x: Node features ``(N_local, F_node)``.
            edge_index: Local edges ``(2, E_local)``.
            edge_attr: Edge features ``(E_local, F_edge)``.
            exchange: The rank's halo exchange (``None`` on a whole graph).
            n_owned: Owned nodes (default: ``exchange.n_owned``, else all rows of ``x``).
            edge_order: The edges' interior-first order, when the exchange is hidden behind
                the interior edges (built once per event by the caller and checked against
                the edges there; default: computed here from the edges, a host sync).

        Returns:
            Logits ``(E_local,)``.

        Raises:
            ValueError: ``edge_order`` orders another number of edges than ``edge_index``.
        """
        if n_owned is None:
            n_owned = exchange.n_owned if exchange is not None else x.shape[0]
        statistics = self._statistics(exchange, edge_index, n_owned)
        with graph_statistics(statistics):
            return self._forward(
                x, edge_index, edge_attr, exchange, n_owned, statistics, edge_order
            )

    def _forward(
        self,
        x: torch.Tensor,
        edge_index: torch.Tensor,
        edge_attr: torch.Tensor,
        exchange: Exchange | None,
        n_owned: int,
        statistics: GroupStatistics | None,
        edge_order: InteriorFirst | None,
    ) -> torch.Tensor:
        hide = self.chunkable and exchange is not None and exchange.hides_communication
        if exchange is None:
            exchange = NoExchange(n_owned)
        # With recomputation the edge MLPs run in chunks of edges whether or not gradients are
        # recorded (no event-sized temporaries when scoring either); regions of steps are
        # recomputed only when they are.
        fused = self.compute.fused
        chunked = self.compute.recompute and self.chunkable
        recompute_regions = self.compute.recompute and torch.is_grad_enabled()
        x, edge_attr = self.input_scaler(x[:n_owned], edge_attr)
        if hide:
            # Interior edges (both endpoints owned) first: they are computed while the halo
            # rows are in flight. The logits are put back in the caller's order at the end.
            # The event's item brings the order along (built once, on the host).
            if edge_order is None:
                edge_order = InteriorFirst.of_edges(edge_index, n_owned)
            elif not edge_order.matches(edge_index):
                raise ValueError(
                    f"edge_order orders {edge_order.order.shape[0]} edges, edge_index holds "
                    f"{edge_index.shape[1]}"
                )
            n_interior = edge_order.n_interior
            edge_index = edge_index.index_select(1, edge_order.order)
            edge_attr = edge_attr.index_select(0, edge_order.order)
        if recompute_regions and self.chunkable:
            h = activation_checkpoint(self.node_encoder, x, use_reentrant=False)
        else:
            h = self._node_mlp(self.node_encoder, [x])
        # Chunked, the edge encoder runs inside the first edge update (its output is never
        # whole); else it runs on its own.
        e = edge_attr if chunked else edge_mlp(self.edge_encoder, edge_attr, compute=self._edges)
        src, dst = edge_index
        graph = LocalGraph(
            src, dst, n_owned, exchange, hide, n_interior if hide else None,
            listed_by_node=fused, chunked=chunked,
        )  # fmt: skip
        if self.architecture.concat_initial:
            # The initial encodings, with their halo rows (exchanged once).
            graph.initial = (exchange(h), e)
        if recompute_regions:
            # Regions of STEPS_PER_REGION steps are recomputed in the backward pass from their
            # first step's latents: the edge latents of the other steps are not kept. The
            # recomputation gets the halo rows (and the BatchNorm statistics) the forward pass
            # received (no communication again), and the region's last edge MLP keeps its
            # recomputed graph for the backward pass (``graph.kept_graphs``).
            graph.exchange = replay = ReplayedExchange(exchange, n_owned)
            graph.in_regions = True
            regions = [replay, graph] if statistics is None else [replay, statistics, graph]
            for first in range(0, self.steps, STEPS_PER_REGION):
                last = min(first + STEPS_PER_REGION, self.steps)
                h, e = activation_checkpoint(
                    self._steps, first, last, h, e, graph, use_reentrant=False,
                    context_fn=partial(joined_regions, regions),
                )  # fmt: skip
        else:
            h, e = self._steps(0, self.steps, h, e, graph)
        # The head sees the final node latents of both endpoints: one more exchange.
        logits = edge_mlp(
            self.edge_head, e, graph.nodes(h), compute=self._edges_of(graph), backward_follows=True
        )
        logits = logits.squeeze(-1)
        if hide:
            logits = logits.index_select(0, edge_order.inverse)
        return logits

    @property
    def _edges(self) -> ComputePolicy:
        """How an unchunked edge MLP computes (the policy without recomputation)."""
        return dataclasses.replace(self.compute, recompute=False)

    def _edges_of(self, graph: LocalGraph) -> ComputePolicy:
        return self.compute if graph.chunked else self._edges

    def _statistics(
        self, exchange: Exchange | None, edge_index: torch.Tensor, n_owned: int
    ) -> GroupStatistics | None:
        """What the BatchNorms of this forward pass reduce over (``None`` without them): the
        group of the exchange's ranks, each edge counted on the rank owning its target node."""
        if not self.architecture.batch_norm:
            return None
        context = exchange.context if exchange is not None else None
        if context is None or context.group_size == 1:
            return GroupStatistics()
        return GroupStatistics(edge_index[1] < n_owned, context.group, distributed=True)

    def _steps(
        self, first: int, last: int, h: torch.Tensor, e: torch.Tensor, graph: LocalGraph
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Message-passing steps ``[first, last)``: new node latents ``(n_owned, H)`` and edge
        latents ``(E_local, H)`` from ``h`` and ``e`` (the edge features before step 0 when the edge
        MLPs run in chunks, encoded inside it)."""
        for step in range(first, last):
            index = 0 if len(self.edge_mlps) == 1 else step
            nodes = graph.nodes(h)
            if graph.initial is None:
                e = edge_mlp(
                    self.edge_mlps[index], e, nodes, residual=self.residual,
                    compute=self._edges_of(graph),
                    row_encoder=self.edge_encoder if graph.chunked and step == 0 else None,
                    kept=graph.kept_graphs(),
                )  # fmt: skip
            else:
                h_initial, e_initial = graph.initial
                nodes = EdgeNodes(
                    torch.cat([nodes.h, h_initial], dim=-1), nodes.src, nodes.dst,
                    incidence=nodes.incidence,
                )  # fmt: skip
                update = edge_mlp(
                    self.edge_mlps[index], torch.cat([e, e_initial], dim=-1), nodes,
                    compute=self._edges,
                )  # fmt: skip
                e = e + update if self.residual else update
            n_local = graph.n_owned + graph.exchange.n_halo if graph.hide else nodes.h.shape[0]
            h = self._node_update(
                index, h, e, graph.src, graph.dst, n_local, graph.incidence(n_local),
                initial=None if graph.initial is None else graph.initial[0][: graph.n_owned],
                in_region=graph.in_regions,
            )  # fmt: skip
        return h, e

    def _node_update(
        self,
        index: int,
        h: torch.Tensor,
        e: torch.Tensor,
        src: torch.Tensor,
        dst: torch.Tensor,
        n_local: int,
        incidence: Incidence | None,
        initial: torch.Tensor | None = None,
        in_region: bool = False,
    ) -> torch.Tensor:
        """New owned-node latents from ``h`` (and the ``initial`` encodings) and the sums (or
        other reductions) of ``e``; ``in_region``: inside a recomputed region (whose forward
        pass keeps nothing, and whose recomputation is back-propagated at once)."""
        n_owned = h.shape[0]
        # Every edge into or out of an owned node is local, so owned rows are complete.
        incoming, outgoing = aggregate_both_ways(
            e, src, dst, n_local, self.aggregation, incidence, chunk_bytes=self.compute.chunk_bytes
        )
        if n_local > n_owned:  # (a slice's gradient is one more kernel: none on a whole graph)
            incoming, outgoing = incoming[:n_owned], outgoing[:n_owned]
        blocks = [h, incoming, outgoing]
        if initial is not None:
            blocks.append(initial)
        return self._node_mlp(
            self.node_mlps[index], blocks, residual=h if self.residual else None,
            recompute=not in_region,
        )  # fmt: skip

    def _node_mlp(
        self,
        mlp: nn.Sequential,
        blocks: list[torch.Tensor],
        residual: torch.Tensor | None = None,
        recompute: bool = True,
    ) -> torch.Tensor:
        """``mlp`` of the blocks side by side (plus ``residual``); ``recompute``: its
        element-wise work is recomputed in the backward pass (when gradients are recorded)."""
        recompute = recompute and torch.is_grad_enabled()
        return block_mlp(
            mlp, blocks, recompute_elementwise=recompute, fused=self.compute.fused,
            residual=residual,
        )  # fmt: skip
