"""Cluster shapes: what each hit's cells say about the particle that made it.

A TrackML ``-cells`` file lists the cells (pixels or strips) of every hit's cluster:
``hit_id, ch0, ch1, value`` (the cell's channel along the module's u and v axes, and its
charge; strips read 1). A cluster's extent across a module of known thickness says which way
the particle crossed it, without any other hit. The features are those of Exa.TrkX's TrackML
pipeline, under acorn's names (``cell_count``, ``cell_val``, ``leta``, ``lphi``, ``lx``, ``ly``,
``lz``, ``geta``, ``gphi``), so acorn configs that name them read the same columns, plus the
extents in cells:

- ``cell_count``: the cluster's cells; ``cell_val``: their summed charge.
- ``extent_u``, ``extent_v``: the cells the cluster spans along u and v (``max - min + 1``).
- ``lx = extent_u * pitch_u``, ``ly = extent_v * pitch_v``, ``lz = 2 * module_t`` [mm]: the
  cluster's box in the module's frame (acorn's convention: twice the thickness).
- ``leta``, ``lphi``: the pseudorapidity and azimuth of ``(lx, ly, lz)`` in the module's frame;
  ``geta``, ``gphi``: the same of that vector turned into the detector's frame by the module's
  rotation. The box has no sign, so these estimate the direction up to the module's symmetries,
  as in Exa.TrkX.

An events file stores each hit's cluster as its measurement, :data:`CLUSTER_COLUMNS`
(``cell_count``, ``cell_val``, ``extent_u``, ``extent_v``: :func:`read_clusters` from a cells
file, or the simulation's); the direction estimates follow from them and the hit's module,
and ``build-graphs`` computes all eleven :data:`CLUSTER_FEATURES` for the graph's nodes
(:func:`cluster_features`).

A cell's channel ``c`` covers ``[c, c + 1) * pitch - half-width`` of its module (``module_maxhu``
along u, ``module_hv`` along v); on the real sample every hit lies at its cells' charge-weighted
centre to 1 micrometre. Shapes: ``N`` hits, ``C`` cells.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from partgnn.data.detector.detector_modules import READOUT_COLUMNS, DetectorModules
from partgnn.errors import InputError

#: The per-hit cluster features a graph keeps beside its nodes (all float32).
CLUSTER_FEATURES: tuple[str, ...] = (
    "cell_count", "cell_val", "extent_u", "extent_v",
    "lx", "ly", "lz", "leta", "lphi", "geta", "gphi",
)  # fmt: skip
#: The clusters table of an event (what an events file stores), one row per hit: the cluster's
#: cells, summed charge, and the cells it spans along u and v.
CLUSTER_COLUMNS: dict[str, np.dtype] = {
    "cell_count": np.dtype(np.int32),
    "cell_val": np.dtype(np.float32),
    "extent_u": np.dtype(np.int32),
    "extent_v": np.dtype(np.int32),
}
#: A cells file's columns.
CELL_COLUMNS: dict[str, np.dtype] = {
    "hit_id": np.dtype(np.int64),
    "ch0": np.dtype(np.int64),
    "ch1": np.dtype(np.int64),
    "value": np.dtype(np.float64),
}
#: How far [cell pitches] a hit may lie outside the span of its cells before its cells are
#: taken to be another hit's.
HIT_TOLERANCE = 1.0
#: The share of an event's hits that may lie away from their cells (a hit position made by
#: another clustering than TrackML's); more says the cells belong to another event.
AWAY_SHARE = 0.01


@dataclass(frozen=True)
class HitModules:
    """The module of each hit, as its cells are read.

    Attributes:
        centre: ``(N, 3)`` [mm].
        rotation: ``(N, 3, 3)`` local-to-global (columns u, v, w).
        half_size: ``(N, 2)`` half-widths along u (the longer one, ``module_maxhu``) and v.
        pitch: ``(N, 2)`` the cells' pitch along u and v [mm].
        thickness: ``(N,)`` [mm].
    """

    centre: np.ndarray
    rotation: np.ndarray
    half_size: np.ndarray
    pitch: np.ndarray
    thickness: np.ndarray

    @property
    def channels(self) -> np.ndarray:
        """``(N, 2)`` the cells of each module along u and v."""
        return np.rint(2.0 * self.half_size / self.pitch).astype(np.int64)

    def local(self, position: np.ndarray) -> np.ndarray:
        """Points ``(N, 3)`` [mm] in their modules' ``(u, v, w)`` frames ``(N, 3)``."""
        return np.einsum("nji,nj->ni", self.rotation, position - self.centre)


def hit_modules(
    modules: DetectorModules,
    layer: np.ndarray,
    module_id: np.ndarray,
    *,
    where: str,
    hit_id: np.ndarray | None = None,
) -> HitModules:
    """The modules of hits on layers ``(N,)`` (indices of the geometry's layers) with module ids
    ``(N,)`` (``hit_id`` ``(N,)``: the hits' ids, for errors).

    Raises:
        InputError: A table without thickness and pitch, or a hit's module missing from it
            (one line naming ``where``, the module and the table).
    """
    if not modules.has_readout:
        raise InputError(
            f"{where}: the detector table {modules.source} has no {', '.join(READOUT_COLUMNS)} "
            "columns: cells cannot be read on it"
        )
    n = len(layer)
    found = np.zeros(n, dtype=bool)
    out = {
        "centre": np.zeros((n, 3)),
        "rotation": np.zeros((n, 3, 3)),
        "half_size": np.ones((n, 2)),
        "pitch": np.ones((n, 2)),
        "thickness": np.ones(n),
    }
    for layer_modules, rows in modules.by_layer(layer):
        at, here = layer_modules.rows(module_id[rows])
        found[rows] = here
        out["centre"][rows] = layer_modules.centre[at]
        out["rotation"][rows] = layer_modules.rotation[at]
        out["half_size"][rows, 0] = layer_modules.half_u[at].max(axis=1)
        out["half_size"][rows, 1] = layer_modules.half_v[at]
        out["pitch"][rows] = layer_modules.pitch[at]
        out["thickness"][rows] = layer_modules.thickness[at]
    if not found.all():
        row = int(np.flatnonzero(~found)[0])
        hit = f"hit_id {int(hit_id[row])}" if hit_id is not None else f"hit row {row + 1}"
        raise InputError(
            f"{where}: module_id {int(module_id[row])} of {hit} (on layer index "
            f"{int(layer[row])}) is not in the detector table {modules.source}"
        )
    return HitModules(**out)


def rows_of_ids(ids: np.ndarray, hit_id: np.ndarray) -> np.ndarray:
    """For each of ``ids`` ``(C,)``, the row of ``hit_id`` ``(N,)`` (unique) that holds it, or
    a row holding another id where none does (the caller compares). Sorted ``ids`` (as files
    list cells) are looked up once per distinct id."""
    order = _sorting(hit_id)
    sorted_ids = hit_id[order]

    def lookup(wanted: np.ndarray) -> np.ndarray:
        return order[np.minimum(np.searchsorted(sorted_ids, wanted), len(order) - 1)]

    if len(ids) < 2 or not bool((ids[1:] >= ids[:-1]).all()):
        return lookup(ids)
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    return np.repeat(lookup(ids[starts]), np.diff(np.r_[starts, len(ids)]))


def _sorting(values: np.ndarray) -> np.ndarray:
    """The stable order that sorts ``values`` ``(N,)`` (files list hits and cells in order:
    then no sort)."""
    if len(values) < 2 or bool((values[1:] >= values[:-1]).all()):
        return np.arange(len(values))
    return np.argsort(values, kind="stable")


@dataclass(frozen=True)
class Cells:
    """An event's cells, each tied to the row of its hit.

    Attributes:
        hit: ``(C,)`` the row of each cell's hit in the hits table.
        channel: ``(C, 2)`` int64 ``ch0, ch1``.
        value: ``(C,)`` the cell's charge.
    """

    hit: np.ndarray
    channel: np.ndarray
    value: np.ndarray


def cells_of_hits(table: Mapping[str, np.ndarray], hit_id: np.ndarray, *, where: str) -> Cells:
    """A cells table's columns (:data:`CELL_COLUMNS`) tied to hits of ids ``(N,)`` (unique).

    Raises:
        InputError: A cell of a hit id that is not a hit, a hit without cells, a negative
            channel or charge (one line naming ``where``, the id and the data row).
    """
    cell_ids = np.asarray(table["hit_id"])
    hit = rows_of_ids(cell_ids, hit_id)
    unknown = hit_id[hit] != cell_ids
    if unknown.any():
        row = int(np.flatnonzero(unknown)[0])
        raise InputError(
            f"{where}: hit_id {int(cell_ids[row])} in data row {row + 1} is not a hit of the "
            f"event ({int(unknown.sum())} cell row(s) name no hit)"
        )
    channel = np.column_stack([table["ch0"], table["ch1"]]).astype(np.int64, copy=False)
    value = np.asarray(table["value"], dtype=np.float64)
    for column, bad in (
        ("ch0", channel[:, 0] < 0),
        ("ch1", channel[:, 1] < 0),
        ("value", value < 0),
    ):
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise InputError(f"{where}: column {column!r} is negative in data row {row + 1}")
    empty = np.bincount(hit, minlength=len(hit_id)) == 0
    if empty.any():
        row = int(np.flatnonzero(empty)[0])
        raise InputError(
            f"{where}: hit_id {int(hit_id[row])} has no cells ({int(empty.sum())} hit(s) have none)"
        )
    return Cells(hit=hit, channel=channel, value=value)


@dataclass(frozen=True)
class ClusterSpans:
    """Each hit's cells summed up: ``count (N,)``, ``charge (N,)``, and the lowest and highest
    channel ``low, high (N, 2)`` along u and v."""

    count: np.ndarray
    charge: np.ndarray
    low: np.ndarray
    high: np.ndarray


def cluster_spans(cells: Cells, n_hits: int) -> ClusterSpans:
    """The spans of ``n_hits`` hits' clusters (every hit has a cell)."""
    order = _sorting(cells.hit)
    hit = cells.hit[order]
    low = np.zeros((n_hits, 2), dtype=np.int64)
    high = np.zeros((n_hits, 2), dtype=np.int64)
    count = np.zeros(n_hits)
    charge = np.zeros(n_hits)
    if len(hit):
        starts = np.flatnonzero(np.r_[True, hit[1:] != hit[:-1]])
        owner = hit[starts]
        for axis in (0, 1):
            channel = np.ascontiguousarray(cells.channel[order, axis])
            low[owner, axis] = np.minimum.reduceat(channel, starts)
            high[owner, axis] = np.maximum.reduceat(channel, starts)
        count[owner] = np.diff(np.r_[starts, len(hit)])
        charge[owner] = np.add.reduceat(cells.value[order], starts)
    return ClusterSpans(count=count, charge=charge, low=low, high=high)


def check_cells_fit(
    spans: ClusterSpans, modules: HitModules, position: np.ndarray, *, where: str
) -> None:
    """Checks that the cells lie on their modules and at their hits.

    Raises:
        InputError: More than :data:`AWAY_SHARE` of the hits more than
            :data:`HIT_TOLERANCE` pitches outside their cells' span (a cells file of another
            event), or a channel beyond its module's cells: one line naming ``where`` and the
            first such hit row.
    """
    local = modules.local(position)[:, :2]
    in_cells = (local + modules.half_size) / modules.pitch
    outside = np.maximum(spans.low - in_cells, in_cells - (spans.high + 1)).max(axis=1)
    away = outside > HIT_TOLERANCE
    if away.sum() > AWAY_SHARE * len(away):
        row = int(np.flatnonzero(away)[0])
        raise InputError(
            f"{where}: {int(away.sum())} of {len(away)} hits lie more than {HIT_TOLERANCE:g} "
            f"cell(s) away from their cells (hit row {row + 1}: {outside[row]:.1f} cells): a "
            "cells file of another event?"
        )
    channels = modules.channels
    beyond = spans.high >= channels
    if beyond.any():
        row, axis = (int(i) for i in np.argwhere(beyond)[0])
        raise InputError(
            f"{where}: ch{axis} {int(spans.high[row, axis])} of hit row {row + 1} is beyond its "
            f"module's {int(channels[row, axis])} cells"
        )


def cluster_table(spans: ClusterSpans) -> pd.DataFrame:
    """The clusters table ``(N, 4)`` (:data:`CLUSTER_COLUMNS`) of clusters' spans."""
    extent = spans.high - spans.low + 1
    columns = {
        "cell_count": spans.count,
        "cell_val": spans.charge,
        "extent_u": extent[:, 0],
        "extent_v": extent[:, 1],
    }
    return pd.DataFrame(
        {name: columns[name].astype(dtype) for name, dtype in CLUSTER_COLUMNS.items()}
    )


def cluster_features(clusters: pd.DataFrame, modules: HitModules) -> pd.DataFrame:
    """The features of the module docstring, one row per hit: ``(N, 11)`` float32 columns
    :data:`CLUSTER_FEATURES`, from the hits' clusters table and modules."""
    extent = clusters[["extent_u", "extent_v"]].to_numpy(np.float64)
    box = np.column_stack([extent * modules.pitch, 2.0 * modules.thickness])
    turned = np.einsum("nij,nj->ni", modules.rotation, box)
    leta, lphi = _eta_phi(box)
    geta, gphi = _eta_phi(turned)
    columns = {
        "cell_count": clusters["cell_count"].to_numpy(),
        "cell_val": clusters["cell_val"].to_numpy(),
        "extent_u": extent[:, 0],
        "extent_v": extent[:, 1],
        "lx": box[:, 0],
        "ly": box[:, 1],
        "lz": box[:, 2],
        "leta": leta,
        "lphi": lphi,
        "geta": geta,
        "gphi": gphi,
    }
    return pd.DataFrame({name: columns[name].astype(np.float32) for name in CLUSTER_FEATURES})


def _eta_phi(vector: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pseudorapidity and azimuth of vectors ``(N, 3)`` (``eta = asinh(z / rho)``, which is
    ``-ln tan(theta / 2)``)."""
    rho = np.hypot(vector[:, 0], vector[:, 1])
    return np.arcsinh(vector[:, 2] / np.maximum(rho, 1e-12)), np.arctan2(vector[:, 1], vector[:, 0])


def read_clusters(
    table: Mapping[str, np.ndarray],
    hits: pd.DataFrame,
    layer: np.ndarray,
    modules: DetectorModules,
    *,
    where: str,
) -> pd.DataFrame:
    """The clusters table of an event's hits from its cells table, every check applied.

    Args:
        table: The cells' columns (:data:`CELL_COLUMNS`).
        hits: The hits (``hit_id``, ``x, y, z``, ``module_id``), ``N`` rows.
        layer: The hits' layer indices ``(N,)``.
        modules: The detector's modules, with thickness and pitch.
        where: The cells file, for errors.

    Returns:
        ``(N, 4)`` :data:`CLUSTER_COLUMNS`, row ``i`` of hit row ``i``.
    """
    hit_id = hits["hit_id"].to_numpy(np.int64)
    cells = cells_of_hits(table, hit_id, where=where)
    on = hit_modules(
        modules, layer, hits["module_id"].to_numpy(np.int64), where=where, hit_id=hit_id
    )
    spans = cluster_spans(cells, len(hits))
    position = hits[["x", "y", "z"]].to_numpy(np.float64)
    check_cells_fit(spans, on, position, where=where)
    return cluster_table(spans)
