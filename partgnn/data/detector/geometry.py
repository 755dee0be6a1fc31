"""Detector geometry: barrel cylinders and endcap disks, from YAML or a TrackML detectors file.

A :class:`DetectorGeometry` is an ordered tuple of :class:`Layer` surfaces plus the solenoid
field. Simulation intersects tracks with its surfaces, graph construction derives adjacent layer
pairs from it, and readers map ``(volume_id, layer_id)`` of each hit to a layer index with it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import yaml

from partgnn.data.detector.magnetic_field import FieldProfile
from partgnn.data.simulation.cell_response import CellResponse
from partgnn.errors import InputError, first_line
from partgnn.resources import detector_geometry_path
from partgnn.yaml_files import load_yaml

LayerKind = Literal["barrel", "endcap"]

_VOLUME_FIELDS = ("volume_id", "kind", "layer_ids", "positions", "material", "resolution")
_DETECTOR_COLUMNS = ("volume_id", "layer_id", "cx", "cy", "cz", "module_hv", "pitch_u", "pitch_v")


@dataclass(frozen=True)
class Layer:
    """One sensitive surface of the detector.

    Attributes:
        volume_id: TrackML volume id (e.g. 8 for the pixel barrel).
        layer_id: TrackML layer id within the volume (2, 4, 6, ...).
        kind: ``"barrel"`` (cylinder at radius ``position``) or ``"endcap"`` (disk at signed
            ``z = position``).
        position: Radius of a barrel cylinder or signed z of an endcap disk [mm].
        r_min: Smallest radius covered [mm] (equals ``position`` for a barrel layer).
        r_max: Largest radius covered [mm] (equals ``position`` for a barrel layer).
        z_min: Smallest z covered [mm] (equals ``position`` for an endcap disk).
        z_max: Largest z covered [mm] (equals ``position`` for an endcap disk).
        material: Thickness in radiation lengths at normal incidence.
        resolution: Hit resolution ``(sigma_rphi, sigma_v)`` [mm]; ``v`` is z on a barrel layer
            and r on an endcap disk.
        efficiency: Probability that a crossing leaves a hit.
        overlap: Probability that a crossing also leaves a hit on a neighbouring, overlapping
            module of the same layer (real detectors tile a layer with overlapping modules, so
            many tracks leave two hits on one layer).
        overlap_offset: Distance between the planes of two overlapping modules along the
            layer's normal (r on a barrel, z on a disk) [mm].
        cells: How its sensors make cells
        (:class:`~partgnn.data.simulation.cell_response.CellResponse`),
            or ``None``: the simulation makes no cells on a geometry with such a layer.
    """

    volume_id: int
    layer_id: int
    kind: LayerKind
    position: float
    r_min: float
    r_max: float
    z_min: float
    z_max: float
    material: float = 0.02
    resolution: tuple[float, float] = (0.015, 0.015)
    efficiency: float = 1.0
    overlap: float = 0.0
    overlap_offset: float = 0.0
    cells: CellResponse | None = None

    @property
    def is_barrel(self) -> bool:
        return self.kind == "barrel"


@dataclass(frozen=True)
class DetectorGeometry:
    """The ordered set of detector layers and the solenoid field.

    Layers are sorted by ``(volume_id, layer_id)``; a layer's index in :attr:`layers` is the
    ``layer`` number used by graphs.

    Attributes:
        layers: The sensitive surfaces.
        b_field: Solenoid field along +z [T].
        name: A label for provenance.
        modules: Path of a TrackML detectors file listing the layers' real modules (simulation
            numbers its hits with them: :mod:`partgnn.data.detector.detector_modules`), or ``None``.
        field_profile: The measured ``Bz(|z|)`` of the real detector
            (:class:`~partgnn.data.detector.magnetic_field.FieldProfile`; simulation uses it with
            ``field_profile: true``), or ``None``.
    """

    layers: tuple[Layer, ...]
    b_field: float = 2.0
    name: str = "trackml"
    modules: str | None = None
    field_profile: FieldProfile | None = None

    def __post_init__(self) -> None:
        keys = [(layer.volume_id, layer.layer_id) for layer in self.layers]
        if len(set(keys)) != len(keys):
            raise InputError(f"geometry {self.name!r}: duplicate (volume_id, layer_id) layers")
        if keys != sorted(keys):
            object.__setattr__(
                self,
                "layers",
                tuple(sorted(self.layers, key=lambda la: (la.volume_id, la.layer_id))),
            )

    def __len__(self) -> int:
        return len(self.layers)

    @property
    def volume_ids(self) -> tuple[int, ...]:
        """Sorted distinct volume ids."""
        return tuple(sorted({layer.volume_id for layer in self.layers}))

    def layer_index(
        self, volume_id: np.ndarray, layer_id: np.ndarray, *, where: str = "hits"
    ) -> np.ndarray:
        """Maps each hit's ``(volume_id, layer_id)`` to its index in :attr:`layers`.

        Args:
            volume_id: Volume ids, shape ``(N,)``.
            layer_id: Layer ids, shape ``(N,)``.
            where: Names the file or event in the error message.

        Returns:
            Layer indices, shape ``(N,)``, dtype int64.

        Raises:
            InputError: If a pair is not a layer of this geometry (names the first unknown one).
        """
        volume_id = np.asarray(volume_id, dtype=np.int64)
        layer_id = np.asarray(layer_id, dtype=np.int64)
        keys = np.array(
            [layer.volume_id * 1000 + layer.layer_id for layer in self.layers], dtype=np.int64
        )
        query = volume_id * 1000 + layer_id
        index = np.searchsorted(keys, query)
        index_clipped = np.minimum(index, len(keys) - 1)
        unknown = keys[index_clipped] != query
        if unknown.any():
            first = int(np.flatnonzero(unknown)[0])
            vol, lay = int(volume_id[first]), int(layer_id[first])
            if vol not in self.volume_ids:
                raise InputError(
                    f"{where}: unknown volume_id {vol} (geometry {self.name!r} has "
                    f"{', '.join(map(str, self.volume_ids))})"
                )
            raise InputError(f"{where}: unknown layer_id {lay} in volume_id {vol}")
        return index_clipped

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str]) -> DetectorGeometry:
        """Reads a geometry in the format of ``configs/detector/trackml.yaml``.

        Raises:
            InputError: If the file is missing, not YAML, or a volume lacks a field.
        """
        path = Path(path)
        try:
            spec = load_yaml(path.read_text(), where=str(path))
        except FileNotFoundError:
            raise InputError(f"{path}: geometry file not found") from None
        except yaml.YAMLError as err:
            raise InputError(f"{path}: not valid YAML ({first_line(err)})") from None
        if not isinstance(spec, dict) or not isinstance(spec.get("volumes"), list):
            raise InputError(f"{path}: expected a mapping with a 'volumes' list")
        layers = []
        for i, volume in enumerate(spec["volumes"]):
            missing = [f for f in _VOLUME_FIELDS if f not in volume]
            if missing:
                raise InputError(f"{path}: volumes[{i}] lacks field {missing[0]!r}")
            layers.extend(_layers_of_volume(volume, where=f"{path}: volumes[{i}]"))
        modules = spec.get("modules")
        profile = spec.get("b_field_profile")
        return cls(
            layers=tuple(layers),
            b_field=float(spec.get("b_field", 2.0)),
            name=str(spec.get("name", path.stem)),
            modules=None if modules is None else str(path.parent / str(modules)),
            field_profile=None
            if profile is None
            else FieldProfile.from_spec(profile, where=str(path)),
        )

    @classmethod
    def from_detectors_csv(
        cls,
        path: str | os.PathLike[str],
        *,
        b_field: float = 2.0,
        material: Mapping[int, float] | None = None,
        efficiency: float = 0.99,
        overlap: Mapping[int, tuple[float, float]] | None = None,
    ) -> DetectorGeometry:
        """Derives the layer geometry from a TrackML ``detectors.csv(.gz)`` (one row per module).

        A layer is a barrel cylinder if its modules' centres spread over both signs of z, else an
        endcap disk. Extents include the module half-length ``module_hv``; resolutions are
        ``pitch / sqrt(12)``.

        Args:
            path: The detectors file.
            b_field: Solenoid field [T] (not in the file).
            material: Radiation lengths per volume id (not in the file); defaults to the values
                of the default YAML geometry, 0.02 for volumes it lacks.
            efficiency: Hit efficiency per crossing (not in the file).
            overlap: ``(overlap, overlap_offset)`` per volume id (not in the file); defaults to
                the values of the default YAML geometry, none for volumes it lacks.

        Raises:
            InputError: If the file is missing, unreadable or lacks a column.
        """
        path = Path(path)
        try:
            modules = pd.read_csv(path)
        except FileNotFoundError:
            raise InputError(f"{path}: detectors file not found") from None
        except (
            pd.errors.ParserError,
            pd.errors.EmptyDataError,
            UnicodeDecodeError,
            OSError,
        ) as err:
            raise InputError(f"{path}: not a readable CSV file ({first_line(err)})") from None
        missing = [c for c in _DETECTOR_COLUMNS if c not in modules.columns]
        if missing:
            raise InputError(f"{path}: missing column {missing[0]!r}")
        default_layers = default_geometry().layers
        if material is None:
            material = {layer.volume_id: layer.material for layer in default_layers}
        if overlap is None:
            overlap = {
                layer.volume_id: (layer.overlap, layer.overlap_offset) for layer in default_layers
            }
        modules = modules.assign(r=np.hypot(modules["cx"], modules["cy"]))
        layers = []
        for (volume_id, layer_id), group in modules.groupby(["volume_id", "layer_id"]):
            hv = group["module_hv"].to_numpy()
            resolution = (
                float(group["pitch_u"].max() / np.sqrt(12.0)),
                float(group["pitch_v"].max() / np.sqrt(12.0)),
            )
            common = {
                "volume_id": int(volume_id),
                "layer_id": int(layer_id),
                "material": float(material.get(int(volume_id), 0.02)),
                "resolution": resolution,
                "efficiency": efficiency,
            }
            common["overlap"], common["overlap_offset"] = overlap.get(int(volume_id), (0.0, 0.0))
            cz = group["cz"].to_numpy()
            if cz.min() < 0 < cz.max():
                radius = float(group["r"].mean())
                layers.append(
                    Layer(
                        kind="barrel",
                        position=radius,
                        r_min=radius,
                        r_max=radius,
                        z_min=float((cz - hv).min()),
                        z_max=float((cz + hv).max()),
                        **common,
                    )
                )
            else:
                z = float(cz.mean())
                r = group["r"].to_numpy()
                layers.append(
                    Layer(
                        kind="endcap",
                        position=z,
                        r_min=float((r - hv).min()),
                        r_max=float((r + hv).max()),
                        z_min=z,
                        z_max=z,
                        **common,
                    )
                )
        return cls(layers=tuple(layers), b_field=b_field, name=path.name, modules=str(path))


def default_geometry_path() -> Path:
    """Path of the default TrackML geometry YAML."""
    return detector_geometry_path()


def default_geometry() -> DetectorGeometry:
    """The TrackML geometry shipped with the package (``configs/detector/trackml.yaml``)."""
    return DetectorGeometry.from_yaml(default_geometry_path())


def load_geometry(path: str | os.PathLike[str] | None) -> DetectorGeometry:
    """Loads a geometry from a YAML file or a TrackML detectors CSV; ``None`` gives the default."""
    if path is None:
        return default_geometry()
    name = str(path)
    if name.endswith((".csv", ".csv.gz")):
        return DetectorGeometry.from_detectors_csv(path)
    return DetectorGeometry.from_yaml(path)


def _layers_of_volume(volume: dict, *, where: str) -> list[Layer]:
    kind = volume["kind"]
    layer_ids, positions = list(volume["layer_ids"]), list(volume["positions"])
    if kind not in ("barrel", "endcap"):
        raise InputError(f"{where}: kind must be 'barrel' or 'endcap' (got {kind!r})")
    if len(layer_ids) != len(positions):
        raise InputError(f"{where}: layer_ids and positions differ in length")
    needed = ("half_length",) if kind == "barrel" else ("r_min", "r_max")
    for field in needed:
        if field not in volume:
            raise InputError(f"{where}: {kind} volume lacks field {field!r}")
    resolution = tuple(float(s) for s in volume["resolution"])
    if len(resolution) != 2:
        raise InputError(f"{where}: resolution must have two entries")
    overlap = float(volume.get("overlap", 0.0))
    overlap_offset = float(volume.get("overlap_offset", 0.0))
    if not 0.0 <= overlap <= 1.0:
        raise InputError(f"{where}: overlap must be in [0, 1] (got {overlap})")
    if not overlap_offset >= 0.0:
        raise InputError(f"{where}: overlap_offset must be >= 0 (got {overlap_offset})")
    cells = volume.get("cells")
    response = None if cells is None else CellResponse.from_spec(cells, where=where)
    layers = []
    for layer_id, position in zip(layer_ids, positions, strict=True):
        position = float(position)
        if kind == "barrel":
            half = float(volume["half_length"])
            extent = {"r_min": position, "r_max": position, "z_min": -half, "z_max": half}
        else:
            extent = {
                "r_min": float(volume["r_min"]),
                "r_max": float(volume["r_max"]),
                "z_min": position,
                "z_max": position,
            }
        layers.append(
            Layer(
                volume_id=int(volume["volume_id"]),
                layer_id=int(layer_id),
                kind=kind,
                position=position,
                material=float(volume["material"]),
                resolution=(resolution[0], resolution[1]),
                efficiency=float(volume.get("efficiency", 1.0)),
                overlap=overlap,
                overlap_offset=overlap_offset,
                cells=response,
                **extent,
            )
        )
    return layers
