"""The detector's real modules: which module a point on a layer lies on.

A TrackML ``detectors.csv`` lists every module (18,728 in the TrackML detector): its layer,
``module_id``, centre, rotation (local ``u, v, w`` axes) and trapezoid half-widths
(``module_minhu``, ``module_maxhu`` along u, ``module_hv`` along v). Simulated hits lie on the
geometry's ideal cylinders and disks; :meth:`DetectorModules.assign` numbers them with the
module whose (u, v) outline contains them, nearest its plane (smallest ``|w|``) where
outlines overlap (the nearest centre where none does), so a simulated event carries the
detector's own module ids and module-map statistics learned on simulation apply to real
events. The second hit of a crossing on an overlapping module
(:attr:`~partgnn.data.geometry.Layer.overlap`) takes the best module other than its first
hit's, as in real events (two hits of one particle on one layer always lie on two modules in
the real sample).

On the real TrackML sample event this rule gives every hit its recorded ``module_id``
(5,527 of 5,527 hits).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.spatial import cKDTree

from partgnn.data.geometry import DetectorGeometry
from partgnn.errors import InputError, first_line

#: Columns a detectors file needs for module lookup.
MODULE_COLUMNS: tuple[str, ...] = (
    "volume_id", "layer_id", "module_id", "cx", "cy", "cz",
    "rot_xu", "rot_xv", "rot_xw", "rot_yu", "rot_yv", "rot_yw", "rot_zu", "rot_zv", "rot_zw",
    "module_minhu", "module_maxhu", "module_hv",
)  # fmt: skip

#: Nearest module centres examined per hit (at most 4 outlines overlap in TrackML; one more for
#: the second hit of a crossing, which must avoid one of them).
_CANDIDATES = 5
#: Score offsets [mm] ranking a module whose outline misses the point, and an excluded one.
_OUTSIDE, _EXCLUDED = 1e6, 1e12


@dataclass(frozen=True)
class LayerModules:
    """The modules of one layer.

    Attributes:
        module_id: ``(M,)`` int64.
        centre: ``(M, 3)`` [mm].
        rotation: Local-to-global rotation ``(M, 3, 3)``: columns are the u, v, w axes.
        half_u: ``(M, 2)`` half-width along u at ``v = -hv`` and ``v = +hv`` [mm].
        half_v: ``(M,)`` [mm].
    """

    module_id: np.ndarray
    centre: np.ndarray
    rotation: np.ndarray
    half_u: np.ndarray
    half_v: np.ndarray

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
            table = pd.read_csv(path, usecols=lambda c: c in MODULE_COLUMNS)
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
            layers.append(
                LayerModules(
                    module_id=rows["module_id"].to_numpy(np.int64),
                    centre=rows[["cx", "cy", "cz"]].to_numpy(np.float64),
                    rotation=rotation,
                    half_u=rows[["module_minhu", "module_maxhu"]].to_numpy(np.float64),
                    half_v=half_v,
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
        order = np.argsort(layer, kind="stable")
        bounds = np.searchsorted(layer[order], np.arange(len(self.layers) + 1))
        for index, modules in enumerate(self.layers):
            rows = order[bounds[index] : bounds[index + 1]]
            if len(rows):
                module[rows] = modules.assign(position[rows], exclude[rows])
        return module


@functools.lru_cache(maxsize=4)
def detector_modules(geometry: DetectorGeometry) -> DetectorModules | None:
    """The modules of ``geometry`` (:attr:`DetectorGeometry.modules`), read once; ``None``
    for a geometry without a module table."""
    if geometry.modules is None:
        return None
    return DetectorModules.from_detectors_csv(geometry.modules, geometry)
