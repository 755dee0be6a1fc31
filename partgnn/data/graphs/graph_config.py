"""What an event graph is: its feature columns and the settings that build it.

Kept apart from :mod:`partgnn.data.graphs.graph_builder` (which needs torch and PyG) so that the
command line can offer the settings as options without importing either.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from partgnn.errors import InputError

#: Names of the columns of ``Data.x``: ``r / 1000`` [m], ``phi / pi``, ``z / 1000`` [m], ``eta``.
NODE_FEATURES: tuple[str, ...] = ("r", "phi", "z", "eta")

#: Names of the columns of ``Data.edge_attr``. The first five are "outer hit minus inner hit":
#: ``dr`` and ``dz`` in metres (the differences of the node features), ``dphi`` in radians
#: wrapped to ``(-pi, pi]``, ``deta`` and ``dR = sqrt(deta**2 + dphi**2)``. Then the two
#: quantities graph construction cuts on, which separate true from fake edges best:
#: ``phi_slope = dphi / dr`` [rad/m] (about ``0.3 B / (2 pT)`` for a prompt track) and ``z0``,
#: where the line through the two hits meets the beam line [m].
EDGE_FEATURES: tuple[str, ...] = ("dr", "dphi", "dz", "deta", "dR", "phi_slope", "z0")

#: Edge features of graphs files written before ``phi_slope`` and ``z0`` were added (files
#: without an ``edge_features`` attribute); they still load and train.
LEGACY_EDGE_FEATURES: tuple[str, ...] = EDGE_FEATURES[:5]


def feature_names(n_node: int, n_edge: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Names of the node and edge feature columns of a graph with these widths.

    The current :data:`NODE_FEATURES` / :data:`EDGE_FEATURES`, the legacy edge features of
    older graphs files, or ``x0, x1, ...`` / ``e0, e1, ...`` for graphs made elsewhere.
    """
    node = NODE_FEATURES if n_node == len(NODE_FEATURES) else tuple(f"x{i}" for i in range(n_node))
    edges = {len(EDGE_FEATURES): EDGE_FEATURES, len(LEGACY_EDGE_FEATURES): LEGACY_EDGE_FEATURES}
    edge = edges.get(n_edge, tuple(f"e{i}" for i in range(n_edge)))
    return node, edge


# Cut values used when a field of GraphBuildConfig is None, with a pT cut and without one;
# measured on simulated pile-up-200 events (see GraphBuildConfig for why).
_PHI_SLOPE_PER_INV_GEV = 0.0006  # rad/mm at pt_min = 1 GeV in a 2 T field
_PHI_SLOPE_NO_PT_CUT = 0.0012  # rad/mm
_Z0_MAX_PT_CUT = 250.0  # mm
_Z0_MAX_NO_PT_CUT = 200.0  # mm
_DETA_MAX_PT_CUT = 1.5
_DETA_MAX_NO_PT_CUT = 1.5


@dataclass(frozen=True)
class GraphBuildConfig:
    """Settings of graph construction.

    A cut left at ``None`` takes a default that depends on ``pt_min`` (see :meth:`resolved`):

    ============= ======================================== ===================
    cut           ``pt_min > 0``                           ``pt_min = 0``
    ============= ======================================== ===================
    phi_slope_max ``0.0006 * (B / 2 T) / pt_min`` rad/mm   ``0.0012`` rad/mm
    z0_max        250 mm                                   200 mm
    deta_max      1.5                                      1.5
    ============= ======================================== ===================

    With a pT cut, efficiency comes first: ``0.0006 / pt_min`` is twice the phi slope of a
    prompt track of ``pt_min`` (``0.3 B / (2 pT)``, 0.0003 rad/mm at 1 GeV and 2 T), room for
    multiple scattering, resolution and the slope's growth with r; ``z0_max`` covers the
    luminous region (sigma_z ~ 55 mm) plus the z0 smearing of strip pairs (long lever arm,
    mm resolution along z). On simulated pile-up-200 events this keeps ~99% of the true pairs
    at pt_min = 1 GeV (the rest are mostly pairs that skip a layer with a missing hit) with a
    purity of ~50%. Without a pT cut the edge budget comes first: the values give ~1.1e6 edges
    on a pile-up-200 event (~1e5 hits), keep true pairs of prompt tracks above ~0.25 GeV and
    ~99% of those of particles above 1 GeV. ``deta_max`` is loose on purpose: eta is measured
    from the origin, so it differs between the hits of a track from a displaced vertex on the
    inner layers, where z0 already constrains the pair better.

    Attributes:
        pt_min: Transverse momentum cut [GeV]. When positive, noise hits and hits of particles
            with ``pT < pt_min`` are removed before building (as in Exa.TrkX); 0 keeps all hits.
        phi_slope_max: Largest ``|dphi / dr|`` of an edge [rad/mm].
        z0_max: Largest ``|z0|`` of the line through the two hits [mm].
        deta_max: Largest ``|eta_outer - eta_inner|``.
        crossing_margin: An edge is dropped when the straight (r, z) segment between its hits
            crosses another layer at least this far inside that layer's extent [mm] (the hits
            are then not on adjacent layers for this track; see
            :func:`~partgnn.data.detector.layer_pairs.layers_between`). The margin keeps curved
            tracks that pass just beside a layer's edge.
    """

    pt_min: float = 0.0
    phi_slope_max: float | None = None
    z0_max: float | None = None
    deta_max: float | None = None
    crossing_margin: float = 10.0

    def resolved(self, b_field: float = 2.0) -> GraphBuildConfig:
        """Returns a copy with every ``None`` cut replaced by its default.

        Args:
            b_field: Solenoid field [T]; the default phi slope is proportional to it.

        Raises:
            InputError: If a value is negative or not finite.
        """
        for name in ("pt_min", "phi_slope_max", "z0_max", "deta_max", "crossing_margin"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise InputError(f"graph config: {name} must be finite and >= 0 (got {value})")
        with_cut = self.pt_min > 0
        phi_slope = (
            _PHI_SLOPE_PER_INV_GEV * (b_field / 2.0) / self.pt_min
            if with_cut
            else _PHI_SLOPE_NO_PT_CUT
        )
        return replace(
            self,
            phi_slope_max=phi_slope if self.phi_slope_max is None else self.phi_slope_max,
            z0_max=(
                (_Z0_MAX_PT_CUT if with_cut else _Z0_MAX_NO_PT_CUT)
                if self.z0_max is None
                else self.z0_max
            ),
            deta_max=(
                (_DETA_MAX_PT_CUT if with_cut else _DETA_MAX_NO_PT_CUT)
                if self.deta_max is None
                else self.deta_max
            ),
        )
