"""How a detector volume's sensors turn a particle's crossing into cells: the settings of the
cell simulation (:mod:`partgnn.data.simulation.cell_simulation`), one per volume of a geometry (its
YAML's ``cells:`` entry)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields

from partgnn.errors import InputError


@dataclass(frozen=True)
class CellResponse:
    """A volume's sensor response.

    Attributes:
        charge_per_mm: Mean charge a crossing leaves per mm of path in the collecting depth
            (the cells' ``value`` unit; strips read 1 per cell whatever their charge).
        fluctuation: The relative width of the charge's Landau fluctuation (Moyal scale over
            the mean).
        depth_scale: The depth charge is collected from, in module thicknesses (``module_t``).
        lorentz: The tangent of the Lorentz angle per tesla of field across the drift [1/T]:
            charge drifting to the readout moves sideways by ``lorentz * B_perp`` per unit of
            depth.
        diffusion: The Gaussian spread of the charge at the readout [mm].
        threshold: A cell's charge below this is not read (in ``value`` units).
        binary: Whether a read cell reports 1 (strips) instead of its charge (pixels).
        cross_talk: The probability that each neighbour of a binary cluster's end cells along u
            also fires.
    """

    charge_per_mm: float = 1.0
    fluctuation: float = 0.05
    depth_scale: float = 1.0
    lorentz: float = 0.0
    diffusion: float = 0.005
    threshold: float = 0.0
    binary: bool = False
    cross_talk: float = 0.0

    @classmethod
    def from_spec(cls, spec: object, *, where: str) -> CellResponse:
        """A response from a geometry YAML's ``cells:`` mapping (missing keys: the defaults).

        Raises:
            InputError: Not a mapping, an unknown key, or a value out of range (one line).
        """
        if not isinstance(spec, Mapping):
            raise InputError(f"{where}: cells must be a mapping of response settings")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(spec) - known)
        if unknown:
            raise InputError(f"{where}: cells: unknown setting {unknown[0]!r}")
        values: dict[str, float | bool] = {}
        for key, value in spec.items():
            if key == "binary":
                if not isinstance(value, bool):
                    raise InputError(f"{where}: cells: binary must be true or false")
                values[key] = value
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InputError(f"{where}: cells: {key} must be a number (got {value!r})")
            values[key] = float(value)
        response = cls(**values)
        response.check(where)
        return response

    def check(self, where: str) -> None:
        """Raises a one-line InputError for a setting out of range."""
        positive = {"charge_per_mm": self.charge_per_mm, "depth_scale": self.depth_scale}
        for key, value in positive.items():
            if not (math.isfinite(value) and value > 0):
                raise InputError(f"{where}: cells: {key} must be > 0 (got {value})")
        for key in ("fluctuation", "diffusion", "threshold"):
            value = getattr(self, key)
            if not (math.isfinite(value) and value >= 0):
                raise InputError(f"{where}: cells: {key} must be >= 0 (got {value})")
        if not math.isfinite(self.lorentz):
            raise InputError(f"{where}: cells: lorentz must be finite")
        if not 0.0 <= self.cross_talk <= 1.0:
            raise InputError(
                f"{where}: cells: cross_talk must be in [0, 1] (got {self.cross_talk})"
            )
