"""Two module maps compared by content: a refit whose windows differ in their last bits (another
CPU's arithmetic) is the same map; a pair, a count or a window that moved makes another map."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from partgnn.data.module_map.compare import WINDOW_RTOL, compare_maps
from partgnn.data.module_map.map_file import ModuleMap, ModuleTriplets


@pytest.fixture
def reference() -> ModuleMap:
    rng = np.random.default_rng(3)
    k, t = 50, 80
    low = rng.normal(size=(k, 4)) * np.array([100.0, 1e-2, 1e-5, 0.1])
    triplet_low = rng.normal(size=(t, 2)) * np.array([10.0, 1e-6])
    triplets = ModuleTriplets(
        np.sort(rng.integers(0, 1 << 40, size=(t, 3)), axis=0), triplet_low,
        triplet_low + 1.0, rng.integers(1, 9, size=t),
    )  # fmt: skip
    return ModuleMap(np.arange(k, dtype=np.int64), np.arange(k, dtype=np.int64) + 7, low,
                     low + np.abs(low), rng.integers(1, 9, size=k), {}, triplets)  # fmt: skip


def test_a_map_is_itself_and_last_bits_do_not_matter(reference):
    assert compare_maps(reference, reference).largest_window_difference == 0.0
    ulp = dataclasses.replace(reference, low=np.nextafter(reference.low, np.inf))
    comparison = compare_maps(ulp, reference)
    assert comparison.same and 0 < comparison.largest_window_difference < 1e-15
    assert comparison.describe().startswith("the same map in substance: the same module pairs")


def test_another_pair_count_or_window_is_another_map(reference):
    cases = {
        "1 of its module pairs differ from the reference's": dataclasses.replace(
            reference, target=np.where(reference.target == 9, 10**6, reference.target)),
        "49 module pairs against the reference's 50": dataclasses.replace(
            reference, source=reference.source[1:], target=reference.target[1:],
            low=reference.low[1:], high=reference.high[1:], count=reference.count[1:]),
        "1 of its doublets behind each pair differ": dataclasses.replace(
            reference, count=np.where(np.arange(50) == 3, 99, reference.count)),
        "it lacks triplets, the reference does not": dataclasses.replace(reference, triplets=None),
        "windows differ by up to 1.0e-06 of their value": dataclasses.replace(
            reference, high=reference.high * (1 + 1e-6)),
    }  # fmt: skip
    for reason, other in cases.items():
        comparison = compare_maps(other, reference)
        assert not comparison.same and reason in comparison.reason, (reason, comparison)
        assert comparison.describe() == f"another map: {comparison.reason}"
    assert WINDOW_RTOL == 1e-9


def test_windows_rounded_outward_to_float32_only_widen(reference, tmp_path):
    rounded = reference.rounded_outward()
    assert rounded.low.dtype == rounded.triplets.high.dtype == np.float32
    assert (rounded.low <= reference.low).all() and (rounded.high >= reference.high).all()
    assert (rounded.triplets.low <= reference.triplets.low).all()
    step = np.nextafter(rounded.high, np.float32(np.inf)) - rounded.high
    assert (rounded.high - reference.high <= step).all()  # at most one float32 step wider
    rounded.save(tmp_path / "map.npz")
    loaded = ModuleMap.load(tmp_path / "map.npz")  # compared in float64, exactly the float32
    assert loaded.low.dtype == np.float64 and np.array_equal(loaded.low, rounded.low)
    assert loaded.settings["window_precision"] == "float32"
    assert compare_maps(loaded, reference).largest_window_difference < 1.2e-7
