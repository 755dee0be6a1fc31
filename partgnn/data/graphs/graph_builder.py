"""Event graphs for GNN tracking: hits are nodes, edges join hits on adjacent detector layers.

:func:`build_event_graph` turns an :class:`~partgnn.data.event.Event` into a
``torch_geometric.data.Data`` with node and edge features, edge truth and the construction
quality (:class:`GraphQuality`). Candidate edges come from phi-sorted, z/r-binned windows per
layer pair (never all pairs) and then pass geometric cuts on phi slope, z0 and delta eta.

Glossary: ``r``, ``phi``, ``z`` cylindrical hit coordinates [mm, rad]; ``eta`` pseudorapidity
of the hit seen from the origin; ``z0`` where the line through two hits meets the beam line
(r = 0) [mm]; "phi slope" ``dphi / dr`` [rad/mm], about ``0.3e-3 * B / (2 pT)`` for a prompt
track (B in T, pT in GeV).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch_geometric.data import Data

from partgnn.data.detector.geometry import DetectorGeometry
from partgnn.data.event import Event
from partgnn.data.graphs.graph_config import GraphBuildConfig
from partgnn.data.graphs.graph_features import cylindrical, graph_features, outer_first
from partgnn.data.graphs.layer_pair_edges import (
    HitCoordinates,
    edges_between_layer_pairs,
)
from partgnn.data.module_map.edges import module_map_edges
from partgnn.data.module_map.map_file import EventDoublets, ModuleMap, event_doublets, module_keys


@dataclass(frozen=True)
class GraphQuality:
    """How well the built graph covers the true track segments of its hits.

    Attributes:
        n_nodes: Hits in the graph (after the pT cut).
        n_edges: Edges built.
        n_true_pairs: True consecutive hit pairs among the graph's hits
            (see :func:`true_consecutive_pairs`), whatever their layers.
        n_true_edges: True pairs present as edges.
        efficiency: ``n_true_edges / n_true_pairs`` (NaN without true pairs).
        purity: ``n_true_edges / n_edges`` (NaN without edges).
        target_pt: The pT [GeV] of the particles the construction targets: a module map's
            fit's ``pt_min`` (it learned from those particles only), else the hits' pT cut.
        target_efficiency: The share of the true pairs of particles of ``pT >= target_pt``
            held as edges (NaN without such pairs): what a map is to be judged by.
    """

    n_nodes: int
    n_edges: int
    n_true_pairs: int
    n_true_edges: int
    efficiency: float
    purity: float
    target_pt: float = 0.0
    target_efficiency: float = math.nan

    def to_dict(self) -> dict[str, int | float]:
        """The fields as a plain dict (for HDF5 attributes, JSON and printing)."""
        return asdict(self)


def true_consecutive_pairs(
    particle_id: np.ndarray, layer: np.ndarray, distance: np.ndarray
) -> np.ndarray:
    """Pairs of hits that are consecutive along one particle's path.

    Each particle's hits are ordered by ``distance`` (from its production vertex); runs of
    consecutive hits on the same layer form a group (e.g. the double hits of overlapping
    modules), and every hit of a group is paired with every hit of the next group. Noise
    (``particle_id == 0``) is never part of a pair.

    Args:
        particle_id: Particle of each hit, shape ``(N,)``; 0 for noise.
        layer: Layer index of each hit, shape ``(N,)``.
        distance: Distance of each hit from its particle's production vertex, shape ``(N,)``.

    Returns:
        Hit index pairs ``(earlier, later)``, shape ``(P, 2)``, dtype int64, sorted by
        particle, then along the path.
    """
    particle_id = np.asarray(particle_id, dtype=np.int64)
    layer = np.asarray(layer, dtype=np.int64)
    distance = np.asarray(distance, dtype=np.float64)
    signal = np.flatnonzero(particle_id != 0)
    order = signal[np.lexsort((distance[signal], particle_id[signal]))]
    if len(order) < 2:
        return np.zeros((0, 2), dtype=np.int64)
    pid, lay = particle_id[order], layer[order]
    new_group = np.ones(len(order), dtype=bool)
    new_group[1:] = (pid[1:] != pid[:-1]) | (lay[1:] != lay[:-1])
    group_start = np.flatnonzero(new_group)
    group_size = np.diff(np.append(group_start, len(order)))
    group_pid = pid[group_start]
    # Group g pairs with g + 1 when both belong to the same particle.
    first = np.flatnonzero(group_pid[:-1] == group_pid[1:])
    if len(first) == 0:
        return np.zeros((0, 2), dtype=np.int64)
    size_a, size_b = group_size[first], group_size[first + 1]
    n_pairs = size_a * size_b
    # Pair k of group pair j is (a = k // size_b, b = k % size_b) within the two groups.
    which = np.repeat(np.arange(len(first)), n_pairs)
    k = np.arange(n_pairs.sum()) - np.repeat(np.cumsum(n_pairs) - n_pairs, n_pairs)
    a = group_start[first][which] + k // size_b[which]
    b = group_start[first + 1][which] + k % size_b[which]
    return np.stack([order[a], order[b]], axis=1)


def build_event_graph(
    event: Event,
    geometry: DetectorGeometry,
    config: GraphBuildConfig | None = None,
    module_map: ModuleMap | None = None,
) -> tuple[Data, GraphQuality]:
    """Builds the hit graph of one event.

    Hits are nodes (in the event's row order, after the pT cut). For each pair of adjacent
    layers (:func:`adjacent_layer_pairs`), an edge goes from a hit on the inner layer to a hit
    on the outer layer when ``dr > 0``, ``|dphi| <= phi_slope_max * dr``,
    ``|z0| <= z0_max``, ``|deta| <= deta_max`` and the straight (r, z) segment between the two
    hits crosses no other layer (:attr:`GraphBuildConfig.crossing_margin`). An edge is true
    when its hits are a true consecutive pair of one particle (:func:`true_consecutive_pairs`,
    in either direction); the hits' distance from their production vertex orders them.

    With a ``module_map``, the edges are instead the hit pairs the map accepts
    (:func:`~partgnn.data.module_map.edges.module_map_edges`: recorded module pairs, inside their
    windows), each directed from the hit at the smaller radius (at equal radii, smaller |z|);
    of ``config`` only ``pt_min`` applies.

    Args:
        event: The event (TrackML tables).
        geometry: The detector; maps ``(volume_id, layer_id)`` to a layer index.
        config: Cuts; ``None`` is ``GraphBuildConfig()``.
        module_map: Build by this module map instead of the geometric cuts.

    Returns:
        ``(data, quality)``. ``data`` holds, with N nodes and E edges:

        - ``x`` (N, 4) float32: :data:`NODE_FEATURES`.
        - ``pos`` (N, 3) float32: hit x, y, z [mm].
        - ``edge_index`` (2, E) int64: inner hit, outer hit; sorted.
        - ``edge_attr`` (E, 7) float32: :data:`EDGE_FEATURES`.
        - ``y`` (E,) float32: 1 for true edges.
        - ``edge_pt`` (E,) float32: pT of a true edge's particle [GeV], 0 for false edges.
        - ``hit_id``, ``particle_id`` (N,) int64 (0 for noise); ``particle_pt`` (N,) float32
          [GeV] (0 for noise); ``layer`` (N,) int64 index into ``geometry.layers``.
        - ``event_id`` int.

    Raises:
        InputError: If a hit's ``(volume_id, layer_id)`` is not a layer of ``geometry``, or a
            cut value is invalid.
    """
    config = (config or GraphBuildConfig()).resolved(geometry.b_field)
    hits, truth = event.hits, event.truth
    layer = geometry.layer_index(
        hits["volume_id"].to_numpy(), hits["layer_id"].to_numpy(), where=event.name
    )
    particle_id = truth["particle_id"].to_numpy().astype(np.int64)
    particle_pt, vertex = particle_properties(event, particle_id)

    keep = np.ones(len(hits), dtype=bool)
    if config.pt_min > 0:
        keep = (particle_id != 0) & (particle_pt >= config.pt_min)
    xyz = np.stack([hits[c].to_numpy() for c in ("x", "y", "z")], axis=1).astype(np.float64)
    xyz, layer, particle_id = xyz[keep], layer[keep], particle_id[keep]
    particle_pt, vertex = particle_pt[keep], vertex[keep]
    hit_id = hits["hit_id"].to_numpy().astype(np.int64)[keep]

    r, phi, z, eta = cylindrical(xyz)
    coords = HitCoordinates(r=r, phi=phi, z=z, eta=eta)

    if module_map is None:
        src, dst = edges_between_layer_pairs(coords, layer, geometry, config)
    else:
        module = module_keys(layer, hits["module_id"].to_numpy()[keep])
        src, dst = _inner_to_outer(
            *module_map_edges(module_map, module, xyz, where=event.name), r, z
        )
    order = np.lexsort((dst, src))
    src, dst = src[order], dst[order]

    distance = np.linalg.norm(xyz - vertex, axis=1)
    true_pairs = true_consecutive_pairs(particle_id, layer, distance)
    y = _match_pairs(src, dst, true_pairs, len(r))
    edge_pt = np.where(y, particle_pt[src], 0.0)

    x, edge_attr = graph_features(xyz, src, dst)

    data = Data(
        x=torch.from_numpy(x),
        pos=torch.from_numpy(xyz.astype(np.float32)),
        edge_index=torch.from_numpy(np.stack([src, dst]).astype(np.int64)),
        edge_attr=torch.from_numpy(edge_attr),
        y=torch.from_numpy(y.astype(np.float32)),
        edge_pt=torch.from_numpy(edge_pt.astype(np.float32)),
        hit_id=torch.from_numpy(hit_id),
        particle_id=torch.from_numpy(particle_id),
        particle_pt=torch.from_numpy(particle_pt.astype(np.float32)),
        layer=torch.from_numpy(layer.astype(np.int64)),
        event_id=int(event.event_id),
    )
    n_true_edges = int(y.sum())
    target_pt = float(module_map.settings.get("pt_min", 0.0)) if module_map else config.pt_min
    target_pairs = true_pairs[particle_pt[true_pairs[:, 0]] >= target_pt]
    edges = np.stack([src, dst], axis=1)
    held = _match_pairs(target_pairs[:, 0], target_pairs[:, 1], edges, len(r))
    target_held = int(held.sum())
    quality = GraphQuality(
        n_nodes=len(r),
        n_edges=len(src),
        n_true_pairs=len(true_pairs),
        n_true_edges=n_true_edges,
        efficiency=n_true_edges / len(true_pairs) if len(true_pairs) else math.nan,
        purity=n_true_edges / len(src) if len(src) else math.nan,
        target_pt=target_pt,
        target_efficiency=target_held / len(target_pairs) if len(target_pairs) else math.nan,
    )
    return data, quality


def particle_properties(event: Event, particle_id: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per hit: its particle's pT [GeV] (0 for noise) and production vertex [mm], (N,), (N, 3).

    A particle missing from the particles table gets pT 0 and the origin as vertex.
    """
    particles = event.particles
    table_id = particles["particle_id"].to_numpy().astype(np.int64)
    pt = np.zeros(len(particle_id))
    vertex = np.zeros((len(particle_id), 3))
    if len(table_id) == 0:
        return pt, vertex
    by_id = np.argsort(table_id, kind="stable")
    row = by_id[np.minimum(np.searchsorted(table_id[by_id], particle_id), len(by_id) - 1)]
    found = (particle_id != 0) & (table_id[row] == particle_id)
    row = row[found]
    pt[found] = np.hypot(particles["px"].to_numpy(), particles["py"].to_numpy())[row]
    vertex[found] = np.stack([particles[c].to_numpy()[row] for c in ("vx", "vy", "vz")], axis=1)
    return pt, vertex


def module_doublets(
    event: Event,
    geometry: DetectorGeometry,
    *,
    pt_min: float = 0.0,
    triplets: bool = False,
    max_vertex_radius: float | None = None,
) -> EventDoublets:
    """An event's true doublets for fitting a module map
    (:func:`~partgnn.data.module_map.fit.fit_module_map`): the modules of the earlier and later
    hit of every true consecutive pair of a particle with ``pT >= pt_min`` [GeV] (and, with
    ``max_vertex_radius``, produced within that distance [mm] of the beam line), ``(M,)``
    each, and the pair's window features ``(M, 4)``; with ``triplets`` also the module
    triplets and their features (:func:`~partgnn.data.module_map.map_file.event_doublets`)."""
    hits = event.hits
    layer = geometry.layer_index(
        hits["volume_id"].to_numpy(), hits["layer_id"].to_numpy(), where=event.name
    )
    particle_id = event.truth["particle_id"].to_numpy().astype(np.int64)
    particle_pt, vertex = particle_properties(event, particle_id)
    xyz = np.stack([hits[c].to_numpy() for c in ("x", "y", "z")], axis=1).astype(np.float64)
    pairs = true_consecutive_pairs(particle_id, layer, np.linalg.norm(xyz - vertex, axis=1))
    pairs = pairs[particle_pt[pairs[:, 0]] >= pt_min]
    if max_vertex_radius is not None:
        radius = np.hypot(vertex[pairs[:, 0], 0], vertex[pairs[:, 0], 1])
        pairs = pairs[radius <= max_vertex_radius]
    module = module_keys(layer, hits["module_id"].to_numpy())
    return event_doublets(module, xyz, pairs, triplets=triplets)


def _inner_to_outer(
    first: np.ndarray, second: np.ndarray, r: np.ndarray, z: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Hit pairs directed from the smaller radius (at equal radii, smaller |z|), each pair once."""
    flip = outer_first(first, second, r, z)
    src, dst = np.where(flip, second, first), np.where(flip, first, second)
    keys = np.unique(src * len(r) + dst)
    return keys // len(r), keys % len(r)


def _match_pairs(
    src: np.ndarray, dst: np.ndarray, true_pairs: np.ndarray, n_nodes: int
) -> np.ndarray:
    """Whether each edge ``(src, dst)`` is a true pair in either direction, shape ``(E,)``."""
    if len(true_pairs) == 0 or len(src) == 0:
        return np.zeros(len(src), dtype=bool)
    a, b = true_pairs[:, 0], true_pairs[:, 1]
    true_keys = np.unique(np.minimum(a, b) * n_nodes + np.maximum(a, b))
    edge_keys = np.minimum(src, dst) * n_nodes + np.maximum(src, dst)
    pos = np.minimum(np.searchsorted(true_keys, edge_keys), len(true_keys) - 1)
    return true_keys[pos] == edge_keys
