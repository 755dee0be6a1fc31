"""The node features an exported model is given, and how it turns them into positions.

ACTS's GNN plugin hands an edge classifier one row per space point: the columns its
``nodeFeatures`` names, each divided by its ``featureScales`` entry. An exported partgnn model
takes such rows: :class:`NodeInputs` says which columns (of ``r`` [mm], ``phi`` [rad], ``z``
[mm], ``eta``, ``x`` and ``y`` [mm]) in which order and with which scales, the positions as
``r, phi, z`` or as ``x, y, z``. The default is partgnn's own node features
(:data:`~partgnn.data.graphs.graph_config.NODE_FEATURES`: ``r / 1000, phi / pi, z / 1000, eta``),
what ACTS makes from ``nodeFeatures = [R, Phi, Z, Eta]`` with ``featureScales = [1000, 3.141592654,
1000, 1]`` (its ITk examples' first four). Without an ``eta`` column the model computes it from
``r`` and ``z`` as partgnn does. Given ``x, y, z`` (ACTS's ``X, Y, Z`` with scales 1), it computes
``r`` and ``phi`` from them in float64, as partgnn's graphs are made from the hits' float32
positions: its features are then the graph files' own, where float32 ``r / 1000`` and
``phi / pi`` have been rounded before the differences are taken (docs/USER_GUIDE.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from partgnn.data.graphs.graph_config import NODE_FEATURES
from partgnn.data.graphs.input_features import DEFAULT_NODE_SCALES
from partgnn.errors import InputError

#: partgnn's own scale of each column (a model's node feature is the value divided by it):
#: the scales a run config's own node columns take by default.
PARTGNN_SCALES: dict[str, float] = DEFAULT_NODE_SCALES
#: The columns an exported model can be given: :data:`NODE_FEATURES`' names, and ``x``, ``y``.
COLUMNS: tuple[str, ...] = tuple(PARTGNN_SCALES)
#: ACTS's ``NodeFeature`` names of partgnn's own columns; acorn's cluster fields
#: (``cluster_r_1`` ... ``cluster_eta_2``) are ACTS's ``Cluster1R`` ... ``Cluster2Eta``.
ACTS_NAMES: dict[str, str] = {"r": "R", "phi": "Phi", "z": "Z", "eta": "Eta", "x": "X", "y": "Y"}
#: ACTS's ``NodeFeature`` names of the cluster shape features
#: (:data:`~partgnn.data.formats.cluster_shapes.CLUSTER_FEATURES`): the single-cluster ones
#: where ACTS has them, the first cluster's for the direction estimates (a pixel hit's only
#: cluster). ACTS fills them from its own cluster data: the same names, its own definitions and
#: charge unit.
CLUSTER_ACTS_NAMES: dict[str, str] = {
    "cell_count": "CellCount", "cell_val": "ChargeSum",
    "extent_u": "ClusterLoc0", "extent_v": "ClusterLoc1",
    "lx": "LocDir01", "ly": "LocDir11", "lz": "LocDir21",
    "leta": "LocEta1", "lphi": "LocPhi1", "geta": "GlobEta1", "gphi": "GlobPhi1",
}  # fmt: skip
#: The positions it needs, one way or the other (``eta`` follows from ``r`` and ``z``).
POSITIONS: tuple[tuple[str, ...], ...] = (("r", "phi", "z"), ("x", "y", "z"))


@dataclass(frozen=True)
class NodeInputs:
    """Which columns the node features hold, in order, and the scale each was divided by.

    Attributes:
        columns: Names from :data:`COLUMNS` and ``kept``, each once; ``r``, ``phi`` and ``z``,
            or ``x``, ``y`` and ``z``, needed.
        scales: ``featureScales``: column ``i`` holds the value divided by ``scales[i]``.
        kept: The model's inputs that are fields of its graphs files (a cluster's radius
            ``cluster_r_1``...): columns a model trained on them is given as they are.
    """

    columns: tuple[str, ...] = NODE_FEATURES
    scales: tuple[float, ...] = tuple(PARTGNN_SCALES[name] for name in NODE_FEATURES)
    kept: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = [name for name in self.columns if name not in (*COLUMNS, *self.kept)]
        if unknown:
            known = ", ".join((*COLUMNS, *self.kept))
            raise InputError(f"node features: {unknown[0]!r} is not one of {known}")
        if len(set(self.columns)) != len(self.columns):
            raise InputError(f"node features: a column named twice ({', '.join(self.columns)})")
        if not any(all(name in self.columns for name in way) for way in POSITIONS):
            missing = [name for name in POSITIONS[0] if name not in self.columns]
            raise InputError(
                f"node features: {', '.join(missing)} missing (the model needs r, phi and z, or "
                "x, y and z)"
            )
        if len(self.scales) != len(self.columns):
            raise InputError(
                f"feature scales: {len(self.scales)} for {len(self.columns)} node features"
            )
        if not all(math.isfinite(s) and s > 0 for s in self.scales):
            raise InputError(f"feature scales must be finite and > 0 (got {list(self.scales)})")

    @classmethod
    def parse(
        cls, columns: str | None, scales: str | None, kept: dict[str, float] | None = None
    ) -> NodeInputs:
        """From ``--node-features r,phi,z`` and ``--feature-scales 1000,3.141592654,1000``
        (comma-separated, partgnn's names in any case, as ACTS's ``R,Phi,Z``, a kept field by
        its name or ACTS's, ``Cluster1R`` for ``cluster_r_1``; each ``None``
        takes the default: partgnn's columns and the model's ``kept`` ones, at partgnn's scale
        of each and the model's of each kept one).

        Raises:
            InputError: An unknown, repeated or missing column, or a bad scale.
        """
        kept = kept or {}
        # (ACTS's names, R, Phi, Z, Eta, X, Y, are partgnn's in capitals)
        from_acts = {acts_name(name): name for name in kept}
        names = (
            (*NODE_FEATURES, *kept)
            if columns is None
            else tuple(
                c.strip().lower()
                if c.strip().lower() in COLUMNS
                else from_acts.get(c.strip(), c.strip())
                for c in columns.split(",")
            )
        )
        if scales is None:
            values = tuple(kept.get(name, PARTGNN_SCALES.get(name, 1.0)) for name in names)
        else:
            try:
                values = tuple(float(s) for s in scales.split(","))
            except ValueError:
                raise InputError(f"feature scales: not numbers ({scales!r})") from None
        return cls(names, values, tuple(kept))

    @property
    def acts_names(self) -> tuple[str | None, ...]:
        """ACTS's ``nodeFeatures`` of the columns (``None``: a field ACTS does not compute)."""
        return tuple(acts_name(name) for name in self.columns)

    def describe(self) -> str:
        """``r / 1000, phi / 3.14159, z / 1000, eta``: what each column holds."""
        return ", ".join(
            name if scale == 1.0 else f"{name} / {scale:g}"
            for name, scale in zip(self.columns, self.scales, strict=True)
        )


def acts_name(column: str) -> str | None:
    """ACTS's ``NodeFeature`` name of a column: ``R`` for ``r``, ``Cluster1R`` for acorn's
    ``cluster_r_1``, ``CellCount`` for ``cell_count``; ``None`` for a field ACTS does not
    compute."""
    if column in ACTS_NAMES:
        return ACTS_NAMES[column]
    if column in CLUSTER_ACTS_NAMES:
        return CLUSTER_ACTS_NAMES[column]
    parts = column.split("_")
    if len(parts) == 3 and parts[0] == "cluster" and parts[1] in ACTS_NAMES and parts[2] in "12":
        return f"Cluster{parts[2]}{ACTS_NAMES[parts[1]]}"
    return None
