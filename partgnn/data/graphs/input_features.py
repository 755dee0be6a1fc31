"""What a model reads: its node and edge input columns, chosen by name, each with a scale.

A column is ``value / scale``. Its value comes from partgnn's own features, in physical units
(node ``r``, ``z``, ``x``, ``y`` [mm], ``phi`` [rad], ``eta``; edge ``dr``, ``dz``, ``z0``
[mm], ``dphi`` [rad], ``deta``, ``dR``, ``phi_slope`` [rad/mm]), or from any per-hit or
per-edge field a graphs file keeps beside its graphs (an acorn file's ``cluster_r_1``, its
``hit_*`` and ``edge_*`` fields: :meth:`~partgnn.data.files.storage.GraphFile.extra`), as stored.
Truth is never an input (:data:`TRUTH_FIELDS`).

The default lists are partgnn's own columns at partgnn's own scales (:meth:`InputFeatures.
default`): the graph files' ``x`` and ``edge_attr``, taken as they are (bitwise), so a run
that names no features computes what it always did. A config names them in ``data.
node_features`` and ``data.edge_features`` (:meth:`InputFeatures.parse`): a list of names
(partgnn's scale for its own, :data:`DEFAULT_NODE_SCALES` and the edges' stored scales;
1 for a file's field), a mapping of names to scales, or a list of
such one-entry mappings; checkpoints carry the config, so scoring reads the same columns.

Shapes: a graph of N nodes and E edges gives node inputs ``(N, F_node)`` and edge inputs
``(E, F_edge)``, float32.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data

from partgnn.data.formats.cluster_shapes import CLUSTER_FEATURES
from partgnn.data.graphs.graph_config import EDGE_FEATURES, NODE_FEATURES
from partgnn.data.graphs.graph_features import LENGTH_SCALE
from partgnn.errors import InputError

#: Said after a missing cluster feature: where such fields come from, and what scores without.
CELLS_HINT = (
    "; cluster shapes come from an event's cells (import-trackml with its -cells files, or "
    "partgnn simulate): a model of hit positions only, such as "
    "pretrained:trackml-full-positions, scores events without them"
)

#: partgnn's own node columns: name -> (the graph field, its column, the scale the stored
#: value was divided by). ``x`` and ``y`` come from the hits' float32 positions [mm].
OWN_NODE_COLUMNS: dict[str, tuple[str, int, float]] = {
    "r": ("x", 0, LENGTH_SCALE),
    "phi": ("x", 1, math.pi),
    "z": ("x", 2, LENGTH_SCALE),
    "eta": ("x", 3, 1.0),
    "x": ("pos", 0, 1.0),
    "y": ("pos", 1, 1.0),
}
#: The scale of each of partgnn's own node columns when a config names it without one
#: (lengths in metres, as partgnn's graphs store r and z, and as ``partgnn export`` takes them).
DEFAULT_NODE_SCALES: dict[str, float] = {
    "r": LENGTH_SCALE, "phi": math.pi, "z": LENGTH_SCALE, "eta": 1.0,
    "x": LENGTH_SCALE, "y": LENGTH_SCALE,
}  # fmt: skip
#: partgnn's own edge columns (:data:`EDGE_FEATURES`): the scale each stored value was divided
#: by, from the physical unit (lengths [mm] stored in metres, the phi slope [rad/mm] in rad/m).
OWN_EDGE_SCALES: dict[str, float] = {
    "dr": LENGTH_SCALE,
    "dphi": 1.0,
    "dz": LENGTH_SCALE,
    "deta": 1.0,
    "dR": 1.0,
    "phi_slope": 1.0 / LENGTH_SCALE,
    "z0": LENGTH_SCALE,
}
#: Edge columns partgnn computes from its own when a model reads them (not stored): name -> the
#: default scale. ``rphi_slope`` [rad]: the edge's mean radius [mm] times its ``phi_slope``
#: [rad/mm] (acorn's ``rphislope`` is it / pi).
DERIVED_EDGE_SCALES: dict[str, float] = {"rphi_slope": 1.0}
#: Fields that are truth, in partgnn's graphs and in acorn's files: never an input.
TRUTH_FIELDS = frozenset({
    "y", "edge_pt", "particle_id", "particle_pt", "hit_particle_id", "hit_pt", "pt",
    "truth_map", "track_to_edge_map", "edge_y", "edge_truth", "weights", "edge_weights",
    "hit_nhits", "nhits", "primary", "pdgId", "radius", "eta_particle", "edge_flipped",
})  # fmt: skip


@dataclass(frozen=True)
class FeatureColumn:
    """One input column: the value named ``name`` divided by ``scale``.

    Attributes:
        name: partgnn's own feature (:data:`OWN_NODE_COLUMNS`, :data:`OWN_EDGE_SCALES`) or a
            field the graphs file keeps.
        scale: What the value is divided by (finite, not 0).
    """

    name: str
    scale: float


@dataclass(frozen=True)
class InputFeatures:
    """A model's node and edge input columns, in order.

    Attributes:
        node: The node columns.
        edge: The edge columns.
    """

    node: tuple[FeatureColumn, ...]
    edge: tuple[FeatureColumn, ...]

    @classmethod
    def default(cls) -> InputFeatures:
        """partgnn's own columns at partgnn's scales: the graph files' ``x`` and
        ``edge_attr``."""
        return cls(
            tuple(FeatureColumn(name, DEFAULT_NODE_SCALES[name]) for name in NODE_FEATURES),
            tuple(FeatureColumn(name, OWN_EDGE_SCALES[name]) for name in EDGE_FEATURES),
        )

    @classmethod
    def parse(cls, node: Any, edge: Any, *, where: str = "config") -> InputFeatures:
        """The columns ``data.node_features`` and ``data.edge_features`` name (``None``:
        partgnn's own).

        Raises:
            InputError: A list that is not names and scales, a name twice or none, a truth
                field, a scale of 0, NaN or inf (one line naming ``where`` and the entry).
        """
        default = cls.default()
        return cls(
            default.node if node is None else _columns(node, "node", where),
            default.edge if edge is None else _columns(edge, "edge", where),
        )

    @property
    def is_default(self) -> bool:
        """Whether these are partgnn's own columns at its scales (the files' tables as they
        are)."""
        return self == InputFeatures.default()

    @property
    def reads_kept_fields(self) -> bool:
        """Whether a column is a field the file keeps (not one of partgnn's own)."""
        return any(c.name not in OWN_NODE_COLUMNS for c in self.node) or any(
            c.name not in OWN_EDGE_SCALES and c.name not in DERIVED_EDGE_SCALES for c in self.edge
        )

    @property
    def widths(self) -> tuple[int, int]:
        """``(F_node, F_edge)``."""
        return len(self.node), len(self.edge)

    def as_config(self) -> dict[str, list[dict[str, float]]]:
        """``{"node_features": [{"r": 1000.0}, ...], "edge_features": [...]}``: the lists as a
        config (or a model card) writes them; :meth:`parse` reads them back."""
        return {
            "node_features": [{c.name: c.scale} for c in self.node],
            "edge_features": [{c.name: c.scale} for c in self.edge],
        }

    def describe(self) -> str:
        """``node r/1000, phi/3.14159, ...; edge dr/1000, ...``: the columns in one line."""

        def shown(columns: tuple[FeatureColumn, ...]) -> str:
            return ", ".join(c.name if c.scale == 1 else f"{c.name}/{c.scale:g}" for c in columns)

        return f"node {shown(self.node)}; edge {shown(self.edge)}"

    def select(
        self,
        graph: Data,
        extra: Mapping[str, np.ndarray],
        edge_extra: Mapping[str, np.ndarray] | None = None,
        *,
        where: str,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The model's inputs of one graph: ``(N, F_node)`` and ``(E, F_edge)`` float32.

        partgnn's own columns at partgnn's scales are the graph's stored values as they are;
        at another scale they are rescaled in float64 and rounded once to float32.

        Args:
            graph: The graph (its ``x``, ``edge_attr``, ``pos``, ``edge_index``).
            extra: The fields the file keeps beside it (:meth:`GraphFile.extra`): per-hit
                fields are those of one value per node.
            edge_extra: The per-edge fields, where they are kept apart (a shard's); ``None``:
                ``extra``'s of one value per edge.
            where: The file and event, for the error.

        Raises:
            InputError: A column the graph does not have, or one of the wrong length (one line
                naming ``where`` and the column).
        """
        if self.is_default:
            return graph.x, graph.edge_attr
        n_nodes, n_edges = int(graph.x.shape[0]), int(graph.edge_index.shape[1])
        node = [_node_column(graph, extra, c, n_nodes, where) for c in self.node]
        edge_fields = extra if edge_extra is None else edge_extra
        edge = [_edge_column(graph, edge_fields, c, n_edges, where) for c in self.edge]
        return _stacked(node, n_nodes), _stacked(edge, n_edges)


def _columns(spec: Any, kind: str, where: str) -> tuple[FeatureColumn, ...]:
    """The columns of a ``data.{kind}_features`` value."""
    setting = f"data.{kind}_features"
    if isinstance(spec, Mapping):
        entries: list[tuple[Any, Any]] = list(spec.items())
    elif isinstance(spec, Sequence) and not isinstance(spec, str):
        entries = []
        for item in spec:
            if isinstance(item, Mapping) and len(item) == 1:
                entries.append(next(iter(item.items())))
            elif isinstance(item, str):
                entries.append((item, None))
            else:
                raise InputError(
                    f"{where}: {setting}: {item!r} is neither a name nor a one-entry mapping "
                    "of a name to its scale"
                )
    else:
        raise InputError(
            f"{where}: {setting} must be a list of names or a mapping of names to scales "
            f"(got {spec!r})"
        )
    if not entries:
        raise InputError(f"{where}: {setting} names no column")
    defaults = DEFAULT_NODE_SCALES if kind == "node" else OWN_EDGE_SCALES | DERIVED_EDGE_SCALES
    columns = []
    for name, scale in entries:
        if not isinstance(name, str) or not name:
            raise InputError(f"{where}: {setting}: {name!r} is not a name")
        if name in TRUTH_FIELDS:
            raise InputError(f"{where}: {setting}: {name} is truth, not an input a model may read")
        if scale is None:
            scale = defaults.get(name, 1.0)
        if isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise InputError(f"{where}: {setting}: the scale of {name} must be a number")
        if not math.isfinite(scale) or scale == 0:
            raise InputError(
                f"{where}: {setting}: the scale of {name} must be finite and not 0 (got {scale})"
            )
        columns.append(FeatureColumn(name, float(scale)))
    names = [c.name for c in columns]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise InputError(f"{where}: {setting}: {twice[0]} named twice")
    return tuple(columns)


def _node_column(
    graph: Data, extra: Mapping[str, np.ndarray], column: FeatureColumn, n: int, where: str
) -> torch.Tensor:
    if column.name in OWN_NODE_COLUMNS:
        field, index, stored_scale = OWN_NODE_COLUMNS[column.name]
        return _rescaled(graph[field][:, index], stored_scale, column.scale)
    return _kept(extra, column, n, "per-hit", where)


def _edge_column(
    graph: Data, extra: Mapping[str, np.ndarray], column: FeatureColumn, n: int, where: str
) -> torch.Tensor:
    if column.name in OWN_EDGE_SCALES:
        index = EDGE_FEATURES.index(column.name)
        if index >= graph.edge_attr.shape[1]:
            raise InputError(
                f"{where}: has no edge feature {column.name} (its edge_attr has "
                f"{graph.edge_attr.shape[1]} columns: a graphs file of an earlier version)"
            )
        return _rescaled(graph.edge_attr[:, index], OWN_EDGE_SCALES[column.name], column.scale)
    if column.name == "rphi_slope":
        return _rphi_slope(graph, column.scale, where)
    return _kept(extra, column, n, "per-edge", where)


def _rphi_slope(graph: Data, scale: float, where: str) -> torch.Tensor:
    """``(r_src + r_dst) / 2 * phi_slope`` [rad] / ``scale``, from the stored float32 ``r /
    1000`` and ``phi_slope`` [rad/m], in float64 rounded once."""
    index = EDGE_FEATURES.index("phi_slope")
    if index >= graph.edge_attr.shape[1]:
        raise InputError(f"{where}: has no edge feature phi_slope (rphi_slope is made from it)")
    r = graph.x[:, 0].to(torch.float64) * LENGTH_SCALE
    src, dst = graph.edge_index
    slope = graph.edge_attr[:, index].to(torch.float64) / LENGTH_SCALE
    return (0.5 * (r[src] + r[dst]) * slope / scale).to(torch.float32)


def _rescaled(stored: torch.Tensor, stored_scale: float, scale: float) -> torch.Tensor:
    """``stored`` (the value / ``stored_scale``) as the value / ``scale``: as it is when the
    scales agree, else in float64 rounded once."""
    if scale == stored_scale:
        return stored.to(torch.float32)
    return (stored.to(torch.float64) * (stored_scale / scale)).to(torch.float32)


def _kept(
    extra: Mapping[str, np.ndarray], column: FeatureColumn, n: int, what: str, where: str
) -> torch.Tensor:
    """A field the file keeps, divided by its scale: one number per row (``n`` rows)."""
    if column.name not in extra:
        kept = ", ".join(sorted(extra)[:8]) or "none"
        raise InputError(
            f"{where}: has no {what} field {column.name} (the fields kept beside its graph: {kept})"
            + (CELLS_HINT if column.name in CLUSTER_FEATURES else "")
        )
    values = np.asarray(extra[column.name])
    if values.ndim != 1 or values.shape[0] != n or not np.issubdtype(values.dtype, np.number):
        raise InputError(
            f"{where}: field {column.name} is not {what}: shape {values.shape}, {values.dtype} "
            f"(expected ({n},) numbers)"
        )
    scaled = torch.from_numpy(values.astype(np.float64) / column.scale).to(torch.float32)
    if not torch.isfinite(scaled).all():
        raise InputError(f"{where}: field {column.name} holds NaN or inf")
    return scaled


def _stacked(columns: list[torch.Tensor], rows: int) -> torch.Tensor:
    if not columns:
        return torch.zeros(rows, 0)
    return torch.stack(columns, dim=1).contiguous()
