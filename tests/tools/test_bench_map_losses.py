"""tools/bench_map_losses.py widens a fitted map's windows to larger floors: the map a fit with
those floors gives (issue 50's floor sweep measured without fitting again)."""

from __future__ import annotations

import runpy

import numpy as np
import pytest

from partgnn.data.module_map.fit import fit_module_map
from tests.distributed.launch import REPOSITORY


@pytest.fixture(scope="module")
def tool() -> dict:
    """The tool's functions (its folder importable while it loads, as when run)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(REPOSITORY / "tools"))
        return runpy.run_path(str(REPOSITORY / "tools" / "bench_map_losses.py"), run_name="tool")


def _doublets(seed: int) -> list[tuple[np.ndarray, ...]]:
    """Two events of doublets and triplets on a few module pairs, some seen >= 20 times."""
    rng = np.random.default_rng(seed)
    events = []
    for n in (400, 150):
        source = rng.integers(0, 8, n).astype(np.int64)
        target = source + 100 + rng.integers(0, 2, n)
        triplet = np.stack([source, target, target + 100], axis=1)
        events.append((source, target, rng.normal(size=(n, 4)) * [50, 0.1, 1e-3, 0.2],
                       triplet, rng.normal(size=(n, 2))))  # fmt: skip
    return events


@pytest.mark.parametrize("width", [0.0, 0.5])
def test_widening_to_larger_floors_is_the_refit_with_them(tool, width):
    doublets = _doublets(1)
    fitted = fit_module_map(doublets, width=width, floor=[0.25, 0.1, 0.1, 0.25], triplet_floor=0.25)
    refit = fit_module_map(doublets, width=width, floor=[0.5, 0.2, 0.2, 0.5], triplet_floor=0.5)
    widened = tool["widened"](fitted, [0.5, 0.2, 0.2, 0.5], 0.5)
    np.testing.assert_allclose(widened.low, refit.low, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(widened.high, refit.high, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(widened.triplets.low, refit.triplets.low, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(widened.triplets.high, refit.triplets.high, rtol=1e-12, atol=1e-12)
    assert not np.allclose(fitted.low, refit.low)  # the floors did change the windows


def test_narrower_floors_are_refused(tool):
    from partgnn.errors import InputError

    fitted = fit_module_map(_doublets(2), floor=0.25)
    with pytest.raises(InputError, match="below the map's floors"):
        tool["widened"](fitted, [0.1, 0.25, 0.25, 0.25], None)
