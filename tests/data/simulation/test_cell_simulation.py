"""Tests of simulated cells: the response's physics on crossings of known incidence, the
simulated events' clusters beside the real sample's, and a simulation's hits untouched by them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from partgnn.data.detector.detector_modules import detector_modules
from partgnn.data.detector.geometry import DetectorGeometry, default_geometry
from partgnn.data.event import TABLES
from partgnn.data.formats.cluster_shapes import CLUSTER_COLUMNS, cluster_spans, hit_modules
from partgnn.data.formats.trackml_reader import read_trackml_event
from partgnn.data.simulation.cell_response import CellResponse
from partgnn.data.simulation.cell_simulation import simulate_cells
from partgnn.data.simulation.simulate import SimulationConfig, simulate_event
from partgnn.errors import InputError

GEOMETRY = default_geometry()
#: The realistic simulation (its switches on).
REALISTIC = SimulationConfig(pileup=10, module_planes=True, field_profile=True, secondaries=True)


def crossings(volume_id: int, slope_u: float, slope_v: float = 0.0, n: int = 4000):
    """``n`` crossings of one module of ``volume_id``'s first layer at its centre region, with
    direction ``(slope_u, slope_v, 1)`` in the module's frame: layer indices, modules,
    positions, momenta."""
    layer_index = next(i for i, la in enumerate(GEOMETRY.layers) if la.volume_id == volume_id)
    modules = detector_modules(GEOMETRY).layers[layer_index]
    row = 0
    rotation, centre = modules.rotation[row], modules.centre[row]
    rng = np.random.default_rng(1)
    local = np.column_stack([rng.uniform(-3, 3, n), rng.uniform(-3, 3, n), np.zeros(n)])
    position = centre + local @ rotation.T
    momentum = np.tile(rotation @ np.array([slope_u, slope_v, 1.0]), (n, 1))
    layer = np.full(n, layer_index)
    on = hit_modules(detector_modules(GEOMETRY), layer, np.full(n, modules.module_id[row]),
                     where="test")  # fmt: skip
    return layer, on, position, momentum


def spans_of(geometry: DetectorGeometry, volume_id: int, slope_u: float, slope_v: float = 0.0):
    layer, on, position, momentum = crossings(volume_id, slope_u, slope_v)
    cells = simulate_cells(geometry, layer, on, position, momentum,
                           np.zeros(len(layer), bool), np.random.default_rng(2))  # fmt: skip
    inside = (cells.channel >= 0).all() and (cells.channel < on.channels[cells.hit]).all()
    assert inside, "a cell outside its module"
    return cluster_spans(cells, len(layer)), on, cells


def with_response(**changes) -> DetectorGeometry:
    """The TrackML geometry with every layer's response changed."""
    layers = tuple(
        dataclasses.replace(la, cells=dataclasses.replace(la.cells, **changes))
        for la in GEOMETRY.layers
    )
    return dataclasses.replace(GEOMETRY, layers=layers)


@pytest.mark.parametrize("slope", [0.0, 0.5, 1.0, 2.0])
def test_the_extent_follows_the_incidence(slope):
    # No Lorentz drift, no diffusion, no cross-talk: a path spanning L cells at a uniform start
    # covers L + 1 cells on average; pixel barrel: 0.15 mm deep, 0.05 mm pitch along u.
    geometry = with_response(lorentz=0.0, diffusion=0.0, cross_talk=0.0)
    spans, on, _ = spans_of(geometry, 8, slope)
    extent = (spans.high - spans.low + 1)[:, 0]
    expected = slope * on.thickness[0] / on.pitch[0, 0] + 1.0
    assert abs(extent.mean() - expected) < 0.1, (extent.mean(), expected)
    # The charge: charge_per_mm times the path, within the Landau width.
    path = on.thickness[0] * np.sqrt(1 + slope**2)
    assert abs(np.median(spans.charge) / path - 1.0) < 0.05


def test_the_lorentz_drift_narrows_clusters_leaning_its_way():
    # In the barrel the field (along v) moves drifting charge along u by lorentz * B per unit
    # depth: a crossing leaning that way by the same slope makes the narrowest clusters.
    lorentz = GEOMETRY.layers[next(i for i, la in enumerate(GEOMETRY.layers)
                                   if la.volume_id == 8)].cells.lorentz  # fmt: skip
    tan = lorentz * GEOMETRY.b_field
    width = {}
    for name, slope in (("with", tan), ("against", -tan)):
        spans, _, _ = spans_of(GEOMETRY, 8, slope)
        width[name] = (spans.high - spans.low + 1)[:, 0].mean()
    assert width["with"] < 1.2 < 1.5 < width["against"], width


def test_strips_read_one_per_cell_and_cross_talk_widens():
    spans, _, cells = spans_of(with_response(cross_talk=0.0), 13, 0.0)
    assert set(np.unique(cells.value)) == {1.0}
    np.testing.assert_array_equal(spans.charge, spans.count)
    plain = (spans.high - spans.low + 1)[:, 0].mean()
    wide, _, _ = spans_of(with_response(cross_talk=0.5), 13, 0.0)
    # Each end fires its neighbour with probability 0.5: one cell more on average.
    assert abs((wide.high - wide.low + 1)[:, 0].mean() - plain - 1.0) < 0.1


def test_the_threshold_drops_small_cells_but_every_hit_keeps_one():
    spans, _, _ = spans_of(with_response(threshold=1e9), 8, 2.0)
    np.testing.assert_array_equal(spans.count, 1.0)


def test_a_simulated_event_has_the_real_columns_and_its_hits_are_untouched():
    event = simulate_event(GEOMETRY, REALISTIC, event_id=3, seed=5)
    assert list(event.clusters.columns) == list(CLUSTER_COLUMNS)
    assert len(event.clusters) == len(event.hits)
    assert (event.clusters["cell_count"] >= 1).all()
    # A geometry without cell responses simulates the same hits, truth and particles, bitwise.
    bare = dataclasses.replace(
        GEOMETRY, layers=tuple(dataclasses.replace(la, cells=None) for la in GEOMETRY.layers)
    )
    plain = simulate_event(bare, REALISTIC, event_id=3, seed=5)
    assert plain.clusters is None
    for table in TABLES:
        pd.testing.assert_frame_equal(getattr(plain, table), getattr(event, table))
    again = simulate_event(GEOMETRY, REALISTIC, event_id=3, seed=5)
    pd.testing.assert_frame_equal(again.clusters, event.clusters)


def test_simulated_clusters_resemble_the_real_samples(sample_dir):
    # Per detector region, the mean cluster size of signal hits against the real sample (the
    # pixel barrel's along v is left out: the simulation's tracks there are more inclined than
    # the sample's; tools/bench_cells.py compares at the real incidence).
    real = read_trackml_event(sample_dir / "event000000001")
    simulated = simulate_event(
        GEOMETRY, dataclasses.replace(REALISTIC, pileup=40), event_id=1, seed=7
    )
    regions = {"pixel endcaps": (7, 9), "pixel barrel": (8,), "strip barrels": (13, 17),
               "strip endcaps": (12, 14, 16, 18)}  # fmt: skip
    for name, volumes in regions.items():
        for feature in ("extent_u", "extent_v", "cell_val"):
            if name == "pixel barrel" and feature != "extent_u":
                continue
            means = []
            for event in (real, simulated):
                signal = (event.truth["particle_id"].to_numpy() != 0) & event.hits[
                    "volume_id"
                ].isin(volumes).to_numpy()
                means.append(float(event.clusters[feature][signal].mean()))
            assert abs(means[1] / means[0] - 1) < 0.2, (name, feature, means)


@pytest.mark.parametrize(
    ("spec", "said"),
    [({"charge_per_mm": 0}, "charge_per_mm must be > 0"), ({"colour": 1}, "unknown setting"),
     ({"binary": 1}, "binary must be true or false"), ({"cross_talk": 2}, "cross_talk must be"),
     ({"diffusion": "x"}, "diffusion must be a number"), ([1, 2], "must be a mapping")],
)  # fmt: skip
def test_a_bad_response_is_one_line(spec, said):
    with pytest.raises(InputError, match=said):
        CellResponse.from_spec(spec, where="geometry.yaml: volumes[0]")
