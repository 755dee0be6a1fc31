"""Run a PyTorch Geometric message-passing layer on one rank's partition of an event graph.

:class:`PartitionedLayer` wraps a ``torch_geometric.nn.MessagePassing`` layer: it fills the halo
rows with the owners' current features (the rank's halo exchange), runs the layer on the local graph
and keeps the owned rows. Every incoming edge of an owned node is local (the partition contract of
docs/DESIGN.md), so this is exact for every layer whose output at node ``i`` depends only on
``x_i``, the incoming edges of ``i`` and their source nodes' ``x``. Which PyG layers that holds for
is an allow-list proven in real processes (:mod:`partgnn.models.pyg_support`); the others are
refused with the reason. GCNConv also needs the degrees of its source nodes, which a rank only knows
for the nodes it owns: the wrapper exchanges them too (:func:`gcn_partition_norm`). Per-node inputs
other than ``x`` (``pos``, ``normal``) are exchanged like ``x``.

Glossary: ``n_owned``/``n_halo`` owned and halo nodes of the rank, ``n_local = n_owned +
n_halo``; ``E_local`` local edges (every edge that touches an owned node); local node order
``[owned; halo]`` as in :class:`~partgnn.partition.halo_plan.HaloPlan`.
"""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.nn import GCNConv, MessagePassing
from torch_geometric.utils import add_remaining_self_loops, scatter

from partgnn.distributed.exchange import Exchange
from partgnn.distributed.failures import agree_on_failure
from partgnn.models.pyg_support import (
    EDGE_KWARGS,
    NODE_KWARGS,
    REFUSED_LAYERS,
    pyg_layer_name,
    refusal,
    training_problem,
)


class PartitionedLayer(nn.Module):
    """A PyG message-passing layer that runs on a rank's partition and returns owned rows.

    ``forward`` exchanges the owned rows' features (and ``pos``/``normal``) so that the halo
    rows hold their owners' values, runs the wrapped layer on the local graph and returns the
    owned rows. Stack several wrappers (with activations between them on the owned rows) to
    build a multi-layer model; each wrapper does its own exchange.

    Exact (equal to the layer on the whole graph, up to float rounding; parameter gradients
    summed over the ranks equal the whole-graph gradients) for the layers of
    :data:`~partgnn.models.pyg_support.EXACT_LAYERS`, each proven in real processes. Every
    other PyG layer is refused with the reason (:data:`~partgnn.models.pyg_support.REFUSED_LAYERS`),
    and so are settings that break exactness: several hops in one forward, order-dependent
    aggregations, graph-level norms, and - in training mode only, checked at every forward -
    batch normalisation with batch statistics and dropout. One's own layer (not a PyG class)
    is refused unless ``assume_exact=True``: the caller vouches that its output at node ``i``
    depends only on node ``i``'s inputs, its incoming edges and their source nodes' inputs.

    An exception on one rank (a check, or the layer itself) becomes an error on every rank of
    the group at once, not a wait for the process group's timeout: with ``check_errors`` the
    ranks agree after the checks and after the layer (two one-integer all-reduces per forward);
    the failing rank raises its exception, the others
    :class:`~partgnn.distributed.failures.PeerFailure`.

    With ``exchange=None`` (a whole graph, on one process) ``forward`` is the bare layer.

    Args:
        layer: The layer to wrap; flow ``source_to_target``, nodes along dimension 0.
        assume_exact: Accept a layer outside the allow-list (one's own ``MessagePassing``).
        check_errors: Agree on failures across the group at every forward (see above).

    Raises:
        TypeError: ``layer`` is not a ``MessagePassing`` layer.
        ValueError: ``layer`` is refused (the message says why).

    Shapes:
        - x_owned: ``(n_owned, F_in)``, the owned nodes' features (all nodes on a whole graph).
        - edge_index: ``(2, E_local)``, local node indices in ``[0, n_local)``.
        - pos / normal (optional): ``(n_owned, D)``, owned rows like ``x_owned``.
        - edge_attr / edge_weight / edge_type (optional): ``(E_local, ...)``, one row per edge.
        - output: ``(n_owned, F_out)``.

    .. warning::
        ``forward`` runs collectives (the halo exchange, the degree exchange of a normalising
        GCNConv, the failure agreement) and so does its backward: every rank of the
        graph-parallel group must call the same wrappers the same number of times in the same
        order, even a rank with no owned nodes or no edges. The output is only the owned rows;
        the next layer's exchange supplies the halo rows it needs. An exception raised in the
        layer's backward on one rank is not agreed on.
    """

    def __init__(
        self, layer: MessagePassing, *, assume_exact: bool = False, check_errors: bool = True
    ) -> None:
        super().__init__()
        check_partitionable(layer, assume_exact=assume_exact)
        self.layer = layer
        self.check_errors = check_errors

    @property
    def name(self) -> str:
        """``PartitionedLayer(<layer class>)``, for messages."""
        return f"PartitionedLayer({type(self.layer).__name__})"

    def forward(
        self,
        x_owned: torch.Tensor,
        edge_index: torch.Tensor,
        exchange: Exchange | None = None,
        **kwargs: torch.Tensor,
    ) -> torch.Tensor:
        """Runs the wrapped layer on the rank's local graph.

        Args:
            x_owned: Owned-node features ``(n_owned, F_in)``.
            edge_index: Local edges ``(2, E_local)`` (owned nodes first, then halo nodes).
            exchange: The rank's halo exchange, ``x_owned -> [x_owned; x_halo]`` (e.g. a
                :class:`~partgnn.distributed.halo_exchange.HaloExchanger`); ``None`` on a whole
                graph.
            **kwargs: Further arguments of the layer's ``forward``: per-node ``pos``/``normal``
                (owned rows, exchanged), per-edge ``edge_attr``/``edge_weight``/``edge_type``
                (one row per local edge), others passed as they are.

        Returns:
            The layer's output at the owned nodes, ``(n_owned, F_out)``.

        Raises:
            ValueError: The layer is refused in the current mode; shapes that do not fit the
                exchange or the edges; GCNConv with ``cached=True`` on a partition.
            TypeError: The layer returned something other than a tensor.
            PeerFailure: Another rank of the group failed in this forward.
        """
        problem = training_problem(self.layer)
        if problem is not None:
            # A property of the model, the same on every rank: raised before any collective.
            raise ValueError(f"{self.name}: {problem}")
        if exchange is None:
            self._check_inputs(x_owned, edge_index, None, kwargs)
            return self._check_output(self.layer(x_owned, edge_index=edge_index, **kwargs))
        layer = self.layer
        normalising_gcn = isinstance(layer, GCNConv) and layer.normalize
        failure = None
        try:
            self._check_inputs(x_owned, edge_index, exchange.n_owned, kwargs)
            if normalising_gcn and layer.cached:
                # Its cache would hold this partition's normalisation for every later graph.
                raise ValueError(
                    f"{self.name}: GCNConv(cached=True) is not supported on a partition "
                    "(every event is another graph); use cached=False"
                )
        except (ValueError, TypeError) as err:
            failure = err
        self._agree(failure, exchange)
        x_local = exchange(x_owned)
        for key in NODE_KWARGS:
            if isinstance(kwargs.get(key), torch.Tensor):
                kwargs[key] = exchange(kwargs[key])
        n_owned = x_owned.shape[0]
        if normalising_gcn:
            edge_index, kwargs["edge_weight"] = gcn_partition_norm(
                edge_index,
                kwargs.pop("edge_weight", None),
                n_owned=n_owned,
                n_local=x_local.shape[0],
                exchange=exchange,
                improved=layer.improved,
                add_self_loops=layer.add_self_loops,
                dtype=x_local.dtype,
            )
        out = None
        try:
            if normalising_gcn:
                # The layer's own forward with normalisation off is lin -> propagate -> bias, so
                # it runs on the edge weights normalised above; the flag is restored whatever
                # happens.
                layer.normalize = False
                try:
                    out = layer(x_local, edge_index=edge_index, **kwargs)
                finally:
                    layer.normalize = True
            else:
                out = layer(x_local, edge_index=edge_index, **kwargs)
            out = self._check_output(out)[:n_owned]
        except Exception as err:  # re-raised on this rank by _agree
            failure = err
        self._agree(failure, exchange)
        return out

    def _agree(self, failure: BaseException | None, exchange: Exchange) -> None:
        context = exchange.context
        if self.check_errors and context is not None:
            agree_on_failure(failure, context, self.name)
        elif failure is not None:
            raise failure

    def _check_inputs(
        self,
        x_owned: torch.Tensor,
        edge_index: torch.Tensor,
        n_owned: int | None,
        kwargs: dict[str, torch.Tensor],
    ) -> None:
        name = self.name
        if not isinstance(x_owned, torch.Tensor) or x_owned.dim() < 1:
            raise ValueError(f"{name}: x_owned must be a tensor with one row per owned node")
        if self.layer.node_dim % x_owned.dim() != 0:
            raise ValueError(
                f"{name}: the layer's node_dim {self.layer.node_dim} is not dimension 0 of a "
                f"{x_owned.dim()}-dimensional x; nodes must be rows"
            )
        if n_owned is not None and x_owned.shape[0] != n_owned:
            raise ValueError(
                f"{name}: x_owned has {x_owned.shape[0]} rows, the rank owns {n_owned} nodes"
            )
        if not isinstance(edge_index, torch.Tensor) or edge_index.dim() != 2:
            raise ValueError(f"{name}: edge_index must be a (2, E_local) tensor of local indices")
        if edge_index.shape[0] != 2:
            raise ValueError(
                f"{name}: edge_index must have shape (2, E_local) (got {tuple(edge_index.shape)})"
            )
        n_edges = edge_index.shape[1]
        for key in EDGE_KWARGS:
            value = kwargs.get(key)
            if isinstance(value, torch.Tensor) and value.shape[0] != n_edges:
                raise ValueError(
                    f"{name}: {key} has {value.shape[0]} rows, edge_index has {n_edges} edges"
                )
        for key in NODE_KWARGS:
            value = kwargs.get(key)
            if isinstance(value, torch.Tensor) and value.shape[0] != x_owned.shape[0]:
                raise ValueError(
                    f"{name}: {key} has {value.shape[0]} rows, x_owned has {x_owned.shape[0]}; "
                    "per-node inputs are owned rows, exchanged like x"
                )

    def _check_output(self, out: object) -> torch.Tensor:
        if not isinstance(out, torch.Tensor):
            raise TypeError(
                f"{self.name}: the layer returned {type(out).__name__}, expected a tensor "
                "(return_attention_weights is not supported)"
            )
        return out


def check_partitionable(layer: nn.Module, *, assume_exact: bool = False) -> None:
    """Refuses layers that :class:`PartitionedLayer` cannot run exactly.

    Args:
        layer: The module to check.
        assume_exact: Accept a layer outside the allow-list (see :class:`PartitionedLayer`).

    Raises:
        TypeError: ``layer`` is not a ``torch_geometric.nn.MessagePassing``.
        ValueError: The layer or one of its settings is refused (the message says why).
    """
    if pyg_layer_name(layer) not in REFUSED_LAYERS and not isinstance(layer, MessagePassing):
        raise TypeError(
            f"PartitionedLayer wraps a torch_geometric MessagePassing layer "
            f"(got {type(layer).__name__})"
        )
    problem = refusal(layer, assume_exact=assume_exact)
    if problem is not None:
        raise ValueError(f"PartitionedLayer: {problem}")


def gcn_partition_norm(
    edge_index: torch.Tensor,
    edge_weight: torch.Tensor | None,
    *,
    n_owned: int,
    n_local: int,
    exchange: Exchange,
    improved: bool = False,
    add_self_loops: bool = True,
    dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GCN's symmetric normalisation ``w_ji / sqrt(deg_j deg_i)`` with the true global degrees.

    Follows ``torch_geometric.nn.conv.gcn_conv.gcn_norm`` step by step (remaining self-loops of
    weight 1, or 2 when ``improved``; in-degree = sum of incoming weights; ``0`` where the degree
    is ``0``) on the local graph. An owned node's degree is complete on its rank, since all its
    incoming edges (its self-loop included) are local; a halo node's is not, so each rank
    computes its owned degrees and the halo exchange brings the halo nodes' degrees from their
    owners. Differentiable with respect to ``edge_weight``: the degree exchange's backward
    returns the halo degrees' gradients to their owners.

    Args:
        edge_index: Local edges ``(2, E_local)``.
        edge_weight: Weights ``(E_local,)``, or ``None`` for ones.
        n_owned: Owned nodes of the rank.
        n_local: Owned plus halo nodes.
        exchange: The rank's halo exchange.
        improved: GCNConv's ``improved`` (self-loops of weight 2).
        add_self_loops: GCNConv's ``add_self_loops``.
        dtype: Dtype of the weights when ``edge_weight`` is ``None``.

    Returns:
        Edges with self-loops ``(2, E')`` and their normalised weights ``(E',)``. Weights of
        edges into halo nodes are exact too, but those nodes' sums are incomplete: use owned
        rows only.

    .. warning::
        Calls ``exchange`` (a collective): every rank must call it at the same point. Its
        backward is a collective too when ``edge_weight`` requires grad, so it must require
        grad on every rank or on none.
    """
    fill_value = 2.0 if improved else 1.0
    if add_self_loops:
        # Also adds loops to halo nodes; they only feed halo rows, which are discarded.
        edge_index, edge_weight = add_remaining_self_loops(
            edge_index, edge_weight, fill_value, n_local
        )
    if edge_weight is None:
        edge_weight = torch.ones(edge_index.shape[1], dtype=dtype, device=edge_index.device)
    src, dst = edge_index[0], edge_index[1]
    degree = scatter(edge_weight, dst, dim=0, dim_size=n_local, reduce="sum")
    degree = exchange(degree[:n_owned].unsqueeze(-1)).squeeze(-1)
    deg_inv_sqrt = degree.pow(-0.5)
    deg_inv_sqrt = deg_inv_sqrt.masked_fill(deg_inv_sqrt == float("inf"), 0.0)
    return edge_index, deg_inv_sqrt[src] * edge_weight * deg_inv_sqrt[dst]
