"""The detector's real modules: which module a point on a layer lies on.

A TrackML ``detectors.csv`` lists every module (18,728 in the TrackML detector): its layer,
``module_id``, centre, rotation (local ``u, v, w`` axes) and trapezoid half-widths
(``module_minhu``, ``module_maxhu`` along u, ``module_hv`` along v). Simulated hits lie on the
geometry's ideal cylinders and disks; :meth:`DetectorModules.assign` numbers them with the
module whose (u, v) outline contains them, nearest its plane (smallest ``|w|``) where
outlines overlap (the nearest centre where none does), so a simulated event carries the
detector's own module ids and module-map statistics learned on simulation apply to real
events. The second hit of a crossing on an overlapping module
(:attr:`~partgnn.data.detector.geometry.Layer.overlap`) takes the best module other than its first
hit's, as in real events (two hits of one particle on one layer always lie on two modules in
the real sample).

On the real TrackML sample event this rule gives every hit its recorded ``module_id``
(5,527 of 5,527 hits).

Real hits lie on their module's plane, not on an ideal cylinder or disk: barrel modules are
flat and staggered in radius, disk modules sit a few mm in front of or behind the disk
(:meth:`DetectorModules.crossed` follows a track from its crossing of the ideal surface to
the plane of every module it passes through; issue 50).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.spatial import cKDTree

from partgnn.data.detector.geometry import DetectorGeometry
from partgnn.errors import InputError, first_line

#: Columns a detectors file needs for module lookup.
MODULE_COLUMNS: tuple[str, ...] = (
    "volume_id", "layer_id", "module_id", "cx", "cy", "cz",
    "rot_xu", "rot_xv", "rot_xw", "rot_yu", "rot_yv", "rot_yw", "rot_zu", "rot_zv", "rot_zw",
    "module_minhu", "module_maxhu", "module_hv",
)  # fmt: skip
#: Columns of a detectors file that say how a module is read out: its thickness and the pitch
#: of its cells along u and v [mm] (TrackML's files have them; a module table without them
#: places hits but cannot interpret cells: :mod:`partgnn.data.formats.cluster_shapes`).
READOUT_COLUMNS: tuple[str, ...] = ("module_t", "pitch_u", "pitch_v")

#: Nearest module centres examined per hit (at most 4 outlines overlap in TrackML; one more for
#: the second hit of a crossing, which must avoid one of them).
_CANDIDATES = 5
#: Score offsets [mm] ranking a module whose outline misses the point, and an excluded one.
_OUTSIDE, _EXCLUDED = 1e6, 1e12
#: Longest path [mm] from a crossing of a layer's ideal surface to a module plane it is
#: followed to (grazing tracks would reach far planes of the same layer; the parabola's error
#: there is 0.16 mm at pT 0.1 GeV).
MAX_PLANE_PATH = 30.0
#: Nearest module centres whose planes a track is followed to from its crossing of the ideal
#: surface (overlapping modules are neighbours; 8 covers the disks' front and back rings).
_CROSSED_CANDIDATES = 8


@dataclass(frozen=True)
class LayerModules:
    """The modules of one layer.

    Attributes:
        module_id: ``(M,)`` int64.
        centre: ``(M, 3)`` [mm].
        rotation: Local-to-global rotation ``(M, 3, 3)``: columns are the u, v, w axes.
        half_u: ``(M, 2)`` half-width along u at ``v = -hv`` and ``v = +hv`` [mm].
        half_v: ``(M,)`` [mm].
        thickness: ``(M,)`` [mm], or ``None`` for a table without :data:`READOUT_COLUMNS`.
        pitch: ``(M, 2)`` the cells' pitch along u and v [mm], or ``None`` as ``thickness``.
    """

    module_id: np.ndarray
    centre: np.ndarray
    rotation: np.ndarray
    half_u: np.ndarray
    half_v: np.ndarray
    thickness: np.ndarray | None = None
    pitch: np.ndarray | None = None

    @functools.cached_property
    def tree(self) -> cKDTree:
        return cKDTree(self.centre)

    def assign(self, position: np.ndarray, exclude: np.ndarray) -> np.ndarray:
        """Module ids of points on this layer ``(N,)``; see the module docstring.

        Args:
            position: ``(N, 3)`` [mm].
            exclude: ``(N,)`` a module each point must not take (0 for none): the module of
                the first hit of a crossing, for its hit on the overlapping neighbour.
        """
        k = min(_CANDIDATES, len(self.module_id))
        distance, nearest = self.tree.query(position, k=k)
        distance = np.asarray(distance).reshape(len(position), k)
        nearest = np.asarray(nearest).reshape(len(position), k)
        offset = position[:, None, :] - self.centre[nearest]
        local = np.einsum("nkji,nkj->nki", self.rotation[nearest], offset)
        u, v, w = local[..., 0], local[..., 1], local[..., 2]
        hv = self.half_v[nearest]
        low_u, high_u = self.half_u[nearest, 0], self.half_u[nearest, 1]
        hu = low_u + (high_u - low_u) * (v + hv) / (2 * hv)
        inside = (np.abs(u) <= hu) & (np.abs(v) <= hv)
        # Containing modules by distance to their plane, then the others by centre distance
        # (both in mm, far below the offsets), an excluded module last.
        score = np.where(inside, np.abs(w), _OUTSIDE + distance)
        score = score + np.where(self.module_id[nearest] == exclude[:, None], _EXCLUDED, 0.0)
        pick = np.argmin(score, axis=1)
        return self.module_id[nearest[np.arange(len(position)), pick]]

    def crossed(
        self, position: np.ndarray, direction: np.ndarray, bend: np.ndarray
    ) -> ModuleCrossings:
        """The modules of this layer a track passes through near each of its crossings of the
        layer's ideal surface, and where.

        The track is followed from ``position`` to each of the nearest module planes as a
        parabola, ``x(t) = position + t direction + t^2 / 2 bend`` (the helix to second order;
        the path is a few mm, 9 mm for 99 % of a pile-up event's crossings, where the
        neglected ``t^3 / (6 R^2)`` is below a micrometre for pT > 0.3 GeV), at most
        :data:`MAX_PLANE_PATH`; a module is crossed where that point lies inside its outline.

        Args:
            position: Crossings of the ideal surface ``(N, 3)`` [mm].
            direction: Unit momentum direction there ``(N, 3)``.
            bend: ``d direction / d path`` there ``(N, 3)`` [1/mm].

        Returns:
            One row per crossed module, ordered by crossing and then along the track.
        """
        k = min(_CROSSED_CANDIDATES, len(self.module_id))
        _, nearest = self.tree.query(position, k=k)
        nearest = np.asarray(nearest).reshape(len(position), k)
        normal = self.rotation[nearest][..., 2]  # the w axes (N, k, 3)
        start, unit, curve = position[:, None, :], direction[:, None, :], bend[:, None, :]
        to_plane = np.einsum("nkj,nkj->nk", self.centre[nearest] - start, normal)
        speed = np.einsum("nkj,nkj->nk", unit, normal)
        turn = np.einsum("nkj,nkj->nk", curve, normal)
        # The root of turn t^2 / 2 + speed t = to_plane nearest the crossing (the straight
        # line's to_plane / speed as turn -> 0), in the form that loses no digits.
        with np.errstate(divide="ignore", invalid="ignore"):
            root = np.sqrt(speed**2 + 2.0 * turn * to_plane)
            path = 2.0 * to_plane / (speed + np.copysign(root, speed))
        path = np.nan_to_num(path, nan=np.inf, posinf=np.inf, neginf=np.inf)
        finite = np.abs(path) <= MAX_PLANE_PATH
        step = np.where(finite, path, 0.0)[..., None]
        point = start + step * unit + 0.5 * step**2 * curve
        local = np.einsum("nkji,nkj->nki", self.rotation[nearest], point - self.centre[nearest])
        hv = self.half_v[nearest]
        low_u, high_u = self.half_u[nearest, 0], self.half_u[nearest, 1]
        hu = low_u + (high_u - low_u) * (local[..., 1] + hv) / (2 * hv)
        inside = finite & (np.abs(local[..., 0]) <= hu) & (np.abs(local[..., 1]) <= hv)
        crossing, column = np.nonzero(inside)
        order = np.lexsort((path[crossing, column], crossing))
        crossing, column = crossing[order], column[order]
        row = nearest[crossing, column]
        return ModuleCrossings(
            crossing, self.module_id[row], point[crossing, column], self.rotation[row],
        )  # fmt: skip

    @functools.cached_property
    def _by_id(self) -> tuple[np.ndarray, np.ndarray]:
        """The rows in module-id order, and the ids in that order."""
        order = np.argsort(self.module_id, kind="stable")
        return order, self.module_id[order]

    def rows(self, module_id: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where modules ``(N,)`` are in this layer's arrays: ``(row (N,), found (N,) bool)``
        (``row`` is 0 where the layer has no such module)."""
        order, ids = self._by_id
        at = np.minimum(np.searchsorted(ids, module_id), len(order) - 1)
        row = order[at]
        found = self.module_id[row] == module_id
        return np.where(found, row, 0), found

    def onto_plane(self, module_id: np.ndarray, position: np.ndarray) -> np.ndarray:
        """``position`` ``(N, 3)`` moved along each module's normal onto the plane of its
        ``module_id`` ``(N,)`` of this layer."""
        row, _ = self.rows(module_id)
        normal = self.rotation[row][..., 2]
        height = np.einsum("nj,nj->n", position - self.centre[row], normal)
        return position - height[:, None] * normal


@dataclass(frozen=True)
class ModuleCrossings:
    """Where tracks pass through modules: one row per crossed module.

    Attributes:
        source: The ideal-surface crossing each row comes from ``(M,)``.
        module_id: ``(M,)`` int64.
        position: On the module's plane ``(M, 3)`` [mm].
        rotation: The module's local-to-global rotation ``(M, 3, 3)`` (columns u, v, w).
    """

    source: np.ndarray
    module_id: np.ndarray
    position: np.ndarray
    rotation: np.ndarray


@dataclass(frozen=True)
class DetectorModules:
    """Every layer's modules, indexed like :attr:`DetectorGeometry.layers`."""

    layers: tuple[LayerModules, ...]
    source: str

    @classmethod
    def from_detectors_csv(
        cls, path: str | os.PathLike[str], geometry: DetectorGeometry
    ) -> DetectorModules:
        """Reads the modules of ``geometry``'s layers from a TrackML detectors file.

        Raises:
            InputError: Missing or unreadable file, a missing column, or a geometry layer
                without modules.
        """
        path = Path(path)
        try:
            table = pd.read_csv(path, usecols=lambda c: c in MODULE_COLUMNS + READOUT_COLUMNS)
        except FileNotFoundError:
            raise InputError(f"{path}: detectors file not found") from None
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError,
                OSError) as err:  # fmt: skip
            raise InputError(f"{path}: not a readable CSV file ({first_line(err)})") from None
        missing = [c for c in MODULE_COLUMNS if c not in table.columns]
        if missing:
            raise InputError(f"{path}: missing column {missing[0]!r}")
        groups = dict(list(table.groupby(["volume_id", "layer_id"])))
        layers = []
        for layer in geometry.layers:
            rows = groups.get((layer.volume_id, layer.layer_id))
            if rows is None:
                raise InputError(
                    f"{path}: no modules for volume_id {layer.volume_id} layer_id "
                    f"{layer.layer_id} of geometry {geometry.name!r}"
                )
            rotation = rows[list(MODULE_COLUMNS[6:15])].to_numpy(np.float64).reshape(-1, 3, 3)
            half_v = rows["module_hv"].to_numpy(np.float64)
            if not (half_v > 0).all():
                raise InputError(f"{path}: module_hv must be > 0")
            readout = _readout(rows, path)
            layers.append(
                LayerModules(
                    module_id=rows["module_id"].to_numpy(np.int64),
                    centre=rows[["cx", "cy", "cz"]].to_numpy(np.float64),
                    rotation=rotation,
                    half_u=rows[["module_minhu", "module_maxhu"]].to_numpy(np.float64),
                    half_v=half_v,
                    thickness=None if readout is None else readout[:, 0],
                    pitch=None if readout is None else readout[:, 1:],
                )
            )
        return cls(tuple(layers), str(path))

    def assign(
        self, layer: np.ndarray, position: np.ndarray, exclude: np.ndarray | None = None
    ) -> np.ndarray:
        """Module id of each point ``(N,)`` int64.

        Args:
            layer: Layer index of each point ``(N,)``.
            position: ``(N, 3)`` [mm].
            exclude: ``(N,)`` a module id each point must not take (0: none); see
                :meth:`LayerModules.assign`.
        """
        module = np.zeros(len(layer), dtype=np.int64)
        exclude = np.zeros(len(layer), dtype=np.int64) if exclude is None else exclude
        for modules, rows in self.by_layer(layer):
            module[rows] = modules.assign(position[rows], exclude[rows])
        return module

    @property
    def has_readout(self) -> bool:
        """Whether the table gives every module's thickness and pitch (:data:`READOUT_COLUMNS`)."""
        return all(layer.pitch is not None for layer in self.layers)

    def by_layer(self, layer: np.ndarray) -> Iterator[tuple[LayerModules, np.ndarray]]:
        """Each layer's modules with the rows of ``layer`` ``(N,)`` on it (layers with rows)."""
        order = np.argsort(layer, kind="stable")
        bounds = np.searchsorted(layer[order], np.arange(len(self.layers) + 1))
        for index, modules in enumerate(self.layers):
            rows = order[bounds[index] : bounds[index + 1]]
            if len(rows):
                yield modules, rows

    def onto_planes(
        self, layer: np.ndarray, module_id: np.ndarray, position: np.ndarray
    ) -> np.ndarray:
        """Points ``(N, 3)`` of layers ``(N,)`` moved onto the planes of their modules ``(N,)``
        (:meth:`LayerModules.onto_plane`)."""
        moved = np.array(position, dtype=np.float64, copy=True)
        for modules, rows in self.by_layer(layer):
            moved[rows] = modules.onto_plane(module_id[rows], position[rows])
        return moved

    def crossed(
        self, layer: np.ndarray, position: np.ndarray, direction: np.ndarray, bend: np.ndarray
    ) -> ModuleCrossings:
        """The modules tracks pass through at their crossings of the layers' ideal surfaces
        (:meth:`LayerModules.crossed`), for crossings of any layers.

        Args:
            layer: Layer index of each crossing ``(N,)``.
            position: ``(N, 3)`` [mm]; direction: unit ``(N, 3)``; bend: ``(N, 3)`` [1/mm].

        Returns:
            Rows ordered by crossing, then along the track.
        """
        parts = []
        for modules, rows in self.by_layer(layer):
            found = modules.crossed(position[rows], direction[rows], bend[rows])
            parts.append(dataclasses.replace(found, source=rows[found.source]))
        if not parts:
            return ModuleCrossings(np.zeros(0, np.int64), np.zeros(0, np.int64),
                                   np.zeros((0, 3)), np.zeros((0, 3, 3)))  # fmt: skip
        joined = ModuleCrossings(*(np.concatenate([getattr(p, f.name) for p in parts])
                                   for f in dataclasses.fields(ModuleCrossings)))  # fmt: skip
        by_crossing = np.argsort(joined.source, kind="stable")
        return ModuleCrossings(*(getattr(joined, f.name)[by_crossing]
                                 for f in dataclasses.fields(ModuleCrossings)))  # fmt: skip


def _readout(rows: pd.DataFrame, path: Path) -> np.ndarray | None:
    """``(M, 3)`` thickness, pitch u, pitch v of a layer's modules, or ``None`` for a table
    without them.

    Raises:
        InputError: A value that is not finite and > 0.
    """
    if not all(column in rows.columns for column in READOUT_COLUMNS):
        return None
    values = rows[list(READOUT_COLUMNS)].to_numpy(np.float64)
    bad = ~(np.isfinite(values) & (values > 0))
    if bad.any():
        row, column = np.argwhere(bad)[0]
        raise InputError(
            f"{path}: {READOUT_COLUMNS[column]} of module_id {int(rows['module_id'].iloc[row])} "
            f"must be > 0 (got {values[row, column]})"
        )
    return values


@functools.lru_cache(maxsize=4)
def detector_modules(geometry: DetectorGeometry) -> DetectorModules | None:
    """The modules of ``geometry`` (:attr:`DetectorGeometry.modules`), read once; ``None``
    for a geometry without a module table."""
    if geometry.modules is None:
        return None
    return DetectorModules.from_detectors_csv(geometry.modules, geometry)
