"""A trained Interaction Network as one plain, scriptable module with ACTS's calling convention.

:class:`ExportedEdgeClassifier` takes what ACTS's GNN plugin gives an edge classifier, the node
features of the space points (:class:`~partgnn.export.node_inputs.NodeInputs`) and the edges
(int64 ``2 x E``), computes partgnn's node and edge features from them (float64, rounded to
float32 as :func:`~partgnn.data.graphs.graph_features.graph_features` does), standardises them with
the checkpoint's statistics and runs the trained weights' message passing as the plain formulation:
every edge update on ``[h_src, h_dst, e]``, every node update on ``[h, incoming, outgoing]``. It
returns logits ``(E,)``; ACTS applies the sigmoid and its cut. What partgnn's model does for
training memory and speed (recomputation, chunks, fused CPU kernels, the halo exchange) is not
in it: on one device it is the same function (tests/export). What helps inference is: the first
layer of an MLP on ``[h_src, h_dst, e]`` is applied block by block (:class:`EdgeBlockMLP`), the
node blocks once per node before they are gathered per edge, as partgnn's model does (a third
of the ``E x 3H`` matmul's work, and no ``E x 3H`` concatenation).
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn

from partgnn.data.graphs.graph_config import EDGE_FEATURES
from partgnn.data.graphs.graph_features import LENGTH_SCALE, MIN_DR
from partgnn.data.graphs.input_features import DERIVED_EDGE_SCALES, OWN_EDGE_SCALES, InputFeatures
from partgnn.errors import InputError
from partgnn.export.node_inputs import COLUMNS, NodeInputs
from partgnn.export.plain_layers import (
    EdgeBlockMLP,
    aggregate,
    no_layout,
    sorted_layout,
)
from partgnn.models.interaction_network import InteractionNetwork


class ExportedEdgeClassifier(nn.Module):
    """Edge logits from space-point features and edges, with a trained model's weights.

    Args:
        model: A trained :class:`~partgnn.models.interaction_network.InteractionNetwork` (its
            weights are copied, in float32).
        inputs: The node features the module is given.

    Shapes:
        - node_features: ``(N, F_in)`` float32, the columns of ``inputs``.
        - edge_index: ``(2, E)`` int64, inner hit first (as partgnn's graphs and ACTS's module
          map give them; ACTS's ``undirected`` must stay off).
        - output: logits ``(E,)`` float32.

    Raises:
        InputError: The model normalises with BatchNorm over the graph (not exportable: its
            statistics are those of the graph being scored, gathered over ranks in training).
    """

    def __init__(
        self,
        model: InteractionNetwork,
        inputs: NodeInputs,
        features: InputFeatures | None = None,
    ) -> None:
        super().__init__()
        features = features or InputFeatures.default()
        architecture = model.architecture
        if architecture.batch_norm:
            raise InputError(
                "model.batch_norm: its BatchNorm uses the statistics of the graph being scored "
                "(over all ranks in training); not exportable"
            )
        model = copy.deepcopy(model).float().eval()
        self.node_mean = model.input_scaler.node_mean
        self.node_std = model.input_scaler.node_std
        self.edge_mean = model.input_scaler.edge_mean
        self.edge_std = model.input_scaler.edge_std
        self.node_encoder = model.node_encoder
        self.edge_encoder = model.edge_encoder
        shared = len(model.edge_mlps) == 1
        width = 2 * architecture.hidden if architecture.concat_initial else architecture.hidden
        blocks = [EdgeBlockMLP(mlp, width) for mlp in model.edge_mlps]
        self.edge_mlps = nn.ModuleList(blocks[0 if shared else step] for step in range(model.steps))
        self.node_mlps = nn.ModuleList(
            model.node_mlps[0 if shared else step] for step in range(model.steps)
        )
        self.edge_head = EdgeBlockMLP(model.edge_head, architecture.hidden)
        self.residual: bool = architecture.residual
        self.concat_initial: bool = architecture.concat_initial
        self.aggregation: str = architecture.aggregation
        #: Sum the edges into nodes by prefix sums over the edges sorted by node instead of a
        #: scatter (:func:`prefix_sums`): onnxruntime's ScatterElements adds element by
        #: element (2/3 of its time on a pile-up-200 graph); the ONNX writer sets it.
        self.sums_by_prefix: bool = False
        columns = {name: index for index, name in enumerate(inputs.columns)}
        # (r and phi are read when given, else computed from x and y; -1: not given)
        self.by_xy: bool = not ("r" in columns and "phi" in columns)
        self.r_column: int = columns.get("r", -1)
        self.phi_column: int = columns.get("phi", -1)
        self.x_column: int = columns.get("x", -1)
        self.y_column: int = columns.get("y", -1)
        self.z_column: int = columns["z"]
        self.eta_column: int = columns.get("eta", -1)
        self.n_columns: int = len(inputs.columns)
        #: What the node features hold, for the one line refusing other inputs.
        self.columns_described: str = inputs.describe()
        #: eta from r and z as ``log(|t| + sqrt(t^2 + 1))`` (``t = z / r``) instead of asinh,
        #: which onnxruntime does not compute in float64 (the ONNX writer sets it).
        self.eta_by_log: bool = False
        # (TorchScript reads no module-level constants: the feature formulas' as attributes)
        self.length_scale: float = LENGTH_SCALE
        self.min_dr: float = MIN_DR
        self.register_buffer("scales", torch.tensor(inputs.scales, dtype=torch.float64))
        # pi as a float64 tensor: exporters store a Python float's fill value in float32
        self.register_buffer("pi", torch.tensor(math.pi, dtype=torch.float64))
        # The model's input columns (what it was trained on: its checkpoint's lists) as rows
        # of two tables computed here: the nodes' [r, phi, z, eta, x, y, given columns...] in
        # physical units, the edges' seven features in the graph files' units.
        node_sources, node_divisors = _node_columns(features, inputs)
        edge_sources, edge_factors = _edge_columns(features)
        self.register_buffer("node_sources", torch.tensor(node_sources, dtype=torch.int64))
        self.register_buffer("edge_sources", torch.tensor(edge_sources, dtype=torch.int64))
        self.reads_xy: bool = self.by_xy or any(s in (4, 5) for s in node_sources)
        self.register_buffer("node_divisors", torch.tensor(node_divisors, dtype=torch.float64))
        self.register_buffer("edge_factors", torch.tensor(edge_factors, dtype=torch.float64))

    def forward(self, node_features: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        """Edge logits ``(E,)`` of the graph ``(node_features, edge_index)``.

        Raises:
            ValueError: The inputs are not ``(N, F_in)`` float32 and ``(2, E)`` int64 (one line
                naming what was expected and what came; in a TorchScript file too).
        """
        refusal = self.refusal(node_features, edge_index)
        if refusal:  # (one short line in a TorchScript traceback, the message last)
            raise ValueError(refusal)
        x, edge_attr = self.features(node_features, edge_index)
        return self.classify(x, edge_attr, edge_index)

    @torch.jit.export
    def refusal(self, node_features: torch.Tensor, edge_index: torch.Tensor) -> str:
        """Why the model cannot score these inputs, in one line naming the shape and dtype
        expected and those given (empty: it can). In a traced file (AOTInductor, ONNX) the
        shapes and dtypes are fixed at export and the file's runtime checks them
        (:mod:`partgnn.export.aoti_checks`; onnxruntime its own).

        Returns:
            ``""`` for ``(N, F_in)`` float32 node features and ``(2, E)`` int64 edges, else
            the line.
        """
        if (
            node_features.dim() != 2
            or node_features.shape[1] != self.n_columns
            or node_features.dtype != torch.float32
        ):
            return (
                "partgnn edge classifier: node_features must be (N, "
                + str(self.n_columns)
                + ") float32 ("
                + self.columns_described
                + "), got "
                + _shape_and_dtype(node_features)
            )
        if edge_index.dim() != 2 or edge_index.shape[0] != 2 or edge_index.dtype != torch.int64:
            return (
                "partgnn edge classifier: edge_index must be (2, E) int64 (inner hit first), "
                "got " + _shape_and_dtype(edge_index)
            )
        return ""

    @torch.jit.export
    def features(
        self, node_features: torch.Tensor, edge_index: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The model's node inputs ``(N, F_node)`` and edge inputs ``(E, F_edge)``, float32,
        from the given columns: partgnn's own by
        :func:`~partgnn.data.graphs.graph_features.graph_features`'s formulas, each divided by the
        scale the model was trained with, and the given fields of its graphs files (by default
        partgnn's ``(N, 4)`` and ``(E, 7)``)."""
        given = node_features.to(torch.float64)
        z = given[:, self.z_column] * self.scales[self.z_column]
        if self.by_xy:
            # (partgnn.data.graphs.graph_features.cylindrical's formulas)
            x = given[:, self.x_column] * self.scales[self.x_column]
            y = given[:, self.y_column] * self.scales[self.y_column]
            # (x * x is exact in float64 for float32 inputs; ONNX has no hypot)
            r = torch.sqrt(x * x + y * y)
            phi = torch.atan2(y, x)
        else:
            r = given[:, self.r_column] * self.scales[self.r_column]
            phi = given[:, self.phi_column] * self.scales[self.phi_column]
            if self.reads_xy:
                x, y = r * torch.cos(phi), r * torch.sin(phi)
            else:
                x, y = torch.zeros_like(r), torch.zeros_like(r)
        if self.eta_column >= 0:
            eta = given[:, self.eta_column] * self.scales[self.eta_column]
        elif self.eta_by_log:
            t = z / torch.clamp(r, min=1e-9)
            eta = torch.sign(t) * torch.log(t.abs() + torch.sqrt(t * t + 1.0))
        else:
            eta = torch.asinh(z / torch.clamp(r, min=1e-9))
        src, dst = edge_index[0], edge_index[1]
        dr = r[dst] - r[src]
        dphi = _wrap_phi(phi[dst] - phi[src], self.pi)
        dz = z[dst] - z[src]
        deta = eta[dst] - eta[src]
        floor = torch.full_like(dr, self.min_dr)
        divisor = torch.where(dr.abs() < self.min_dr, torch.where(dr < 0, -floor, floor), dr)
        edge_attr = torch.stack(
            [
                dr / self.length_scale,
                dphi,
                dz / self.length_scale,
                deta,
                torch.sqrt(deta * deta + dphi * dphi),
                dphi / (divisor / self.length_scale),
                (z[src] - r[src] * dz / divisor) / self.length_scale,
                0.5 * (r[src] + r[dst]) * dphi / divisor,  # rphi_slope [rad]
            ],
            dim=1,
        )
        # (partgnn's own in node_inputs.COLUMNS' order, then every given column's value)
        physical = torch.cat([torch.stack([r, phi, z, eta, x, y], dim=1), given * self.scales], 1)
        nodes = physical.index_select(1, self.node_sources) / self.node_divisors
        edges = edge_attr.index_select(1, self.edge_sources) * self.edge_factors
        return nodes.to(torch.float32), edges.to(torch.float32)

    @torch.jit.export
    def classify(
        self, x: torch.Tensor, edge_attr: torch.Tensor, edge_index: torch.Tensor
    ) -> torch.Tensor:
        """Logits ``(E,)`` from the model's inputs ``x (N, F_node)`` and ``edge_attr (E,
        F_edge)`` (what ``partgnn infer`` gives the model: by default a graph file's ``x`` and
        ``edge_attr``)."""
        x = (x - self.node_mean) / self.node_std
        edge_attr = (edge_attr - self.edge_mean) / self.edge_std
        h = self.node_encoder(x)
        e = self.edge_encoder(edge_attr)
        h_initial, e_initial = h, e
        src, dst = edge_index[0], edge_index[1]
        n_nodes = h.shape[0]
        by_prefix = self.sums_by_prefix and self.aggregation != "max"
        into, out_of = no_layout(src), no_layout(src)
        if by_prefix:
            into, out_of = sorted_layout(dst, n_nodes), sorted_layout(src, n_nodes)
        # (TorchScript's zip takes no strict=; the lists have one entry per step each)
        for edge_mlp, node_mlp in zip(self.edge_mlps, self.node_mlps):  # noqa: B905
            nodes, edges = h, e
            if self.concat_initial:
                nodes = torch.cat([h, h_initial], dim=1)
                edges = torch.cat([e, e_initial], dim=1)
            update = edge_mlp(nodes, edges, src, dst)
            e = e + update if self.residual else update
            incoming = aggregate(e, dst, n_nodes, self.aggregation, into, by_prefix)
            outgoing = aggregate(e, src, n_nodes, self.aggregation, out_of, by_prefix)
            blocks = [h, incoming, outgoing]
            if self.concat_initial:
                blocks.append(h_initial)
            update = node_mlp(torch.cat(blocks, dim=1))
            h = h + update if self.residual else update
        return self.edge_head(h, e, src, dst).squeeze(-1)


def _shape_and_dtype(tensor: torch.Tensor) -> str:
    """``(5, 3) float64``: a tensor's shape and dtype, as the input checks say them."""
    sizes = [str(size) for size in tensor.shape]
    shape = "(" + ", ".join(sizes) + ("," if len(sizes) == 1 else "") + ")"
    return shape + " " + _dtype_name(tensor.dtype)


def _dtype_name(dtype: torch.dtype) -> str:
    """``float32``... (TorchScript holds a dtype as a number: its name by comparison)."""
    names = [
        (torch.float32, "float32"), (torch.float64, "float64"), (torch.float16, "float16"),
        (torch.bfloat16, "bfloat16"), (torch.int64, "int64"), (torch.int32, "int32"),
        (torch.int16, "int16"), (torch.int8, "int8"), (torch.uint8, "uint8"),
        (torch.bool, "bool"),
    ]  # fmt: skip
    for known, name in names:
        if dtype == known:
            return name
    return "of another dtype"


def _wrap_phi(dphi: torch.Tensor, pi: torch.Tensor) -> torch.Tensor:
    """Differences of two angles in ``(-pi, pi]`` wrapped to ``(-pi, pi]``, as
    :func:`~partgnn.data.graphs.graph_features.wrap_phi`: one turn added or taken away (no
    remainder, which ONNX computes in float32); ``pi`` a float64 tensor."""
    return torch.where(dphi > pi, dphi - 2.0 * pi, torch.where(dphi <= -pi, dphi + 2.0 * pi, dphi))


def _node_columns(features: InputFeatures, inputs: NodeInputs) -> tuple[list[int], list[float]]:
    """Each model node column's row in the physical table and its divisor.

    Raises:
        InputError: The model reads a field of its graphs files that the inputs do not give.
    """
    sources, divisors = [], []
    for column in features.node:
        if column.name in COLUMNS:
            sources.append(COLUMNS.index(column.name))
        elif column.name in inputs.columns:
            sources.append(len(COLUMNS) + inputs.columns.index(column.name))
        else:
            raise InputError(
                f"the model reads {column.name} (a field of its graphs files): give it as a "
                f"node feature (--node-features {','.join((*inputs.columns, column.name))})"
            )
        divisors.append(column.scale)
    return sources, divisors


def _edge_columns(features: InputFeatures) -> tuple[list[int], list[float]]:
    """Each model edge column's row among partgnn's seven edge features, and its factor from
    the stored unit.

    Raises:
        InputError: The model reads a per-edge field of its graphs files, which ACTS cannot
            give an edge classifier (it gives node features and edges).
    """
    sources, factors = [], []
    for column in features.edge:
        if column.name in DERIVED_EDGE_SCALES:  # (computed after partgnn's seven)
            sources.append(len(EDGE_FEATURES) + list(DERIVED_EDGE_SCALES).index(column.name))
            factors.append(1.0 / column.scale)
            continue
        if column.name not in OWN_EDGE_SCALES:
            raise InputError(
                f"the model reads the edge field {column.name} of its graphs files; ACTS gives "
                "an edge classifier node features and edges only: not exportable"
            )
        sources.append(EDGE_FEATURES.index(column.name))
        factors.append(OWN_EDGE_SCALES[column.name] / column.scale)
    return sources, factors
