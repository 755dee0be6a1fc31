"""Whether two module maps are the same map in substance: a refit on another machine.

A map fitted from the same events on a CPU with other vector instructions (or another numpy)
can differ from the shipped one in the last bits of its windows: the quantities it bounds pass
through ``sin``, ``arctan2`` and ``sqrt``, whose last bit is not fixed across implementations.
Such a map is the same map: the same module pairs and triplets, seen the same number of times,
with windows equal to within :data:`WINDOW_RTOL` of their value. Anything else (a pair more or
less, another count, a window that moved further) is another map.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from partgnn.data.module_map.map_file import ModuleMap

#: The largest relative difference of a window bound between two maps that are the same map
#: (last-bit differences of float64 arithmetic are ~1e-16 relative; a window's bound moves by
#: 1e-9 only if a hit moved by a micrometre in a metre: no real construction changes).
WINDOW_RTOL = 1e-9


@dataclass(frozen=True)
class MapComparison:
    """How a map compares with a reference.

    Attributes:
        same: The same map in substance.
        reason: What differs, in words (``""`` when ``same``).
        largest_window_difference: The largest relative difference of a window bound over the
            pairs and triplets both maps hold (0 when bitwise equal; ``nan`` when the pairs
            differ).
    """

    same: bool
    reason: str
    largest_window_difference: float

    def describe(self) -> str:
        """One line: ``the same map in substance: ...`` or ``another map: ...``."""
        if self.same:
            return (
                "the same map in substance: the same module pairs and triplets and counts, "
                f"windows within {self.largest_window_difference:.1e} of each other (relative; "
                f"tolerance {WINDOW_RTOL:.0e})"
            )
        return f"another map: {self.reason}"


def compare_maps(found: ModuleMap, reference: ModuleMap) -> MapComparison:
    """Compares ``found`` with ``reference`` by content (not by file bytes).

    Args:
        found: A map fitted here (e.g. by ``partgnn pretrained NAME --make-map``).
        reference: The map it should equal (the shipped one).
    """
    for name, a, b in (
        ("module pairs", np.stack([found.source, found.target], axis=1),
         np.stack([reference.source, reference.target], axis=1)),
        ("doublets behind each pair", found.count, reference.count),
    ):  # fmt: skip
        difference = _array_difference(a, b, name)
        if difference:
            return MapComparison(False, difference, float("nan"))
    if (found.triplets is None) != (reference.triplets is None):
        which = "has" if found.triplets is not None else "lacks"
        return MapComparison(False, f"it {which} triplets, the reference does not", float("nan"))
    largest = max(_relative_difference(found.low, reference.low),
                  _relative_difference(found.high, reference.high))  # fmt: skip
    if found.triplets is not None and reference.triplets is not None:
        mine, theirs = found.triplets, reference.triplets
        for name, a, b in (("module triplets", mine.modules, theirs.modules),
                           ("triplets behind each row", mine.count, theirs.count)):  # fmt: skip
            difference = _array_difference(a, b, name)
            if difference:
                return MapComparison(False, difference, float("nan"))
        largest = max(largest, _relative_difference(mine.low, theirs.low),
                      _relative_difference(mine.high, theirs.high))  # fmt: skip
    if largest > WINDOW_RTOL:
        return MapComparison(
            False,
            f"windows differ by up to {largest:.1e} of their value (tolerance {WINDOW_RTOL:.0e})",
            largest,
        )
    return MapComparison(True, "", largest)


def _array_difference(a: np.ndarray, b: np.ndarray, name: str) -> str:
    """What differs between two integer arrays, in words (``""``: equal)."""
    if a.shape != b.shape:
        return f"{a.shape[0]:,} {name} against the reference's {b.shape[0]:,}"
    if not np.array_equal(a, b):
        rows = int((a != b).reshape(a.shape[0], -1).any(axis=1).sum()) if a.ndim > 1 else None
        count = int((a != b).sum()) if rows is None else rows
        return f"{count:,} of its {name} differ from the reference's"
    return ""


def _relative_difference(a: np.ndarray, b: np.ndarray) -> float:
    """The largest ``|a - b| / max(|a|, |b|)`` over the entries (0 where both are 0)."""
    if a.size == 0:
        return 0.0
    scale = np.maximum(np.abs(a), np.abs(b))
    difference = np.abs(a - b)
    with np.errstate(invalid="ignore", divide="ignore"):
        relative = np.where(scale > 0, difference / np.where(scale > 0, scale, 1.0), 0.0)
    return float(relative.max())
