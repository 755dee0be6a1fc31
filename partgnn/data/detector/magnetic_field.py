"""The solenoid's field along the beam: uniform, or a profile ``Bz(|z|)`` measured on real events.

A uniform field is what most toy simulations assume; the real TrackML detector's field falls
off towards the ends of the solenoid (issue 50: measured from the truth momenta of the real
sample, ``tools/studies/bench_field.py``: 2.0 T at the centre, about 1.85 T at ``|z|`` = 1.1 m, 1.0
T at 1.9 m, near zero beyond 2.3 m; the radial component is below 0.1 T everywhere it is measured).
Tracks in the endcaps bend less than a uniform field says, which changes how the phi slope of
their doublets evolves along them: a module map fitted on uniform-field events rejects real
endcap triplets.

Glossary: ``bz`` the field along +z [T]; ``abs_z`` distance from the detector's centre along
the beam [mm].
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from partgnn.errors import InputError


@dataclass(frozen=True)
class FieldProfile:
    """``Bz`` as a function of ``|z|``: linear between knots, the last knot's value beyond it;
    no radial component and no dependence on the radius (what the real sample shows within
    its precision, ``tools/studies/bench_field.py``).

    Attributes:
        abs_z: Knots ``(K,)`` [mm], increasing from 0.
        bz: The field there ``(K,)`` [T].
    """

    abs_z: tuple[float, ...]
    bz: tuple[float, ...]

    def __post_init__(self) -> None:
        abs_z = np.asarray(self.abs_z, dtype=np.float64)
        if (
            len(self.abs_z) < 2
            or len(self.abs_z) != len(self.bz)
            or abs_z[0] != 0.0
            or not (np.diff(abs_z) > 0).all()
            or not np.isfinite(np.asarray(self.bz, dtype=np.float64)).all()
        ):
            raise InputError(
                "b_field_profile: abs_z must start at 0 and increase, with one finite bz per "
                f"abs_z and at least two knots (got {len(self.abs_z)} abs_z, {len(self.bz)} bz)"
            )

    @classmethod
    def from_spec(cls, spec: Mapping, *, where: str) -> FieldProfile:
        """From a geometry file's ``b_field_profile: {abs_z: [...], bz: [...]}``.

        Raises:
            InputError: Not such a mapping, or bad knots (naming ``where``).
        """
        if not isinstance(spec, Mapping) or not {"abs_z", "bz"} <= set(spec):
            raise InputError(f"{where}: b_field_profile must be a mapping with abs_z and bz lists")
        try:
            return cls(_floats(spec["abs_z"]), _floats(spec["bz"]))
        except (TypeError, ValueError):
            raise InputError(
                f"{where}: b_field_profile: abs_z and bz must be lists of numbers"
            ) from None
        except InputError as err:
            raise InputError(f"{where}: {err}") from None

    def at(self, z: np.ndarray) -> np.ndarray:
        """``Bz`` [T] at positions along the beam ``z`` [mm], any shape."""
        return np.interp(np.abs(z), self.abs_z, self.bz)


def _floats(values: Sequence) -> tuple[float, ...]:
    return tuple(float(value) for value in values)
