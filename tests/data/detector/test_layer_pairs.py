"""Tests of partgnn.data.detector.layer_pairs: adjacent layers derived from the geometry by ray
tracing."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from partgnn.data.detector.geometry import DetectorGeometry, default_geometry
from partgnn.data.detector.layer_pairs import adjacent_layer_pairs, layers_between

Key = tuple[int, int]


@pytest.fixture(scope="module")
def geometry() -> DetectorGeometry:
    return default_geometry()


@pytest.fixture(scope="module")
def named_pairs(geometry: DetectorGeometry) -> set[tuple[Key, Key]]:
    return _names(geometry, adjacent_layer_pairs(geometry))


def _names(geometry: DetectorGeometry, pairs: np.ndarray) -> set[tuple[Key, Key]]:
    layers = geometry.layers
    return {
        ((layers[a].volume_id, layers[a].layer_id), (layers[b].volume_id, layers[b].layer_id))
        for a, b in pairs.tolist()
    }


def _chain(volume_id: int, layer_ids: list[int]) -> set[tuple[Key, Key]]:
    return {((volume_id, a), (volume_id, b)) for a, b in itertools.pairwise(layer_ids)}


def test_shape_dtype_unique_and_deterministic(geometry: DetectorGeometry) -> None:
    pairs = adjacent_layer_pairs(geometry)
    assert pairs.dtype == np.int64
    assert pairs.ndim == 2 and pairs.shape[1] == 2
    assert len(np.unique(pairs, axis=0)) == len(pairs)
    assert ((pairs >= 0) & (pairs < len(geometry.layers))).all()
    np.testing.assert_array_equal(pairs, adjacent_layer_pairs(geometry))


def test_no_pair_in_both_directions_or_on_one_layer(geometry: DetectorGeometry) -> None:
    pairs = {tuple(p) for p in adjacent_layer_pairs(geometry).tolist()}
    assert all(a != b for a, b in pairs)
    assert not any((b, a) in pairs for a, b in pairs)


def test_pixel_barrel_chain(named_pairs: set[tuple[Key, Key]]) -> None:
    assert _chain(8, [2, 4, 6, 8]) <= named_pairs
    # Layers with one layer in between are not adjacent.
    assert ((8, 2), (8, 6)) not in named_pairs
    assert ((8, 4), (8, 8)) not in named_pairs


def test_strip_barrel_chains(named_pairs: set[tuple[Key, Key]]) -> None:
    assert _chain(13, [2, 4, 6, 8]) <= named_pairs
    assert ((8, 8), (13, 2)) in named_pairs
    assert ((13, 8), (17, 2)) in named_pairs
    assert ((17, 2), (17, 4)) in named_pairs


def test_barrel_to_first_endcap_disk(named_pairs: set[tuple[Key, Key]]) -> None:
    # Pixel endcaps: +z disks have layer_id 2 nearest the barrel, -z disks layer_id 14.
    assert ((8, 2), (9, 2)) in named_pairs
    assert ((8, 2), (7, 14)) in named_pairs
    assert ((13, 2), (14, 2)) in named_pairs
    assert ((13, 2), (12, 12)) in named_pairs
    assert ((17, 2), (18, 2)) in named_pairs
    assert ((17, 2), (16, 12)) in named_pairs


def test_endcap_disk_chains(named_pairs: set[tuple[Key, Key]]) -> None:
    assert _chain(9, [2, 4, 6, 8, 10, 12, 14]) <= named_pairs
    assert _chain(7, [14, 12, 10, 8, 6, 4, 2]) <= named_pairs
    for plus, minus in ((14, 12), (18, 16)):
        assert _chain(plus, [2, 4, 6, 8, 10, 12]) <= named_pairs
        assert _chain(minus, [12, 10, 8, 6, 4, 2]) <= named_pairs
    # Pixel disks lead into the strip disks.
    assert ((9, 14), (14, 8)) in named_pairs


def test_no_pair_between_opposite_endcaps(geometry: DetectorGeometry) -> None:
    for a, b in adjacent_layer_pairs(geometry).tolist():
        la, lb = geometry.layers[a], geometry.layers[b]
        if not la.is_barrel and not lb.is_barrel:
            assert np.sign(la.position) == np.sign(lb.position), (la, lb)


def test_inner_layer_is_crossed_first(geometry: DetectorGeometry) -> None:
    for a, b in adjacent_layer_pairs(geometry).tolist():
        la, lb = geometry.layers[a], geometry.layers[b]
        if la.is_barrel and lb.is_barrel:
            assert la.position < lb.position
        elif not la.is_barrel and not lb.is_barrel:
            assert abs(la.position) < abs(lb.position)


def test_pairs_follow_the_geometry(geometry: DetectorGeometry) -> None:
    # Without pixel barrel layer (8, 4), rays go from (8, 2) straight to (8, 6).
    layers = tuple(la for la in geometry.layers if (la.volume_id, la.layer_id) != (8, 4))
    smaller = dataclasses.replace(geometry, layers=layers)
    names = _names(smaller, adjacent_layer_pairs(smaller))
    assert ((8, 2), (8, 6)) in names
    assert not any((8, 4) in pair for pair in names)


def test_layers_between(geometry: DetectorGeometry) -> None:
    index = {(la.volume_id, la.layer_id): i for i, la in enumerate(geometry.layers)}
    assert layers_between(geometry, index[8, 2], index[8, 4]).tolist() == []
    gap = layers_between(geometry, index[8, 6], index[13, 2])
    assert index[8, 8] in gap
    assert index[9, 2] in gap and index[7, 14] in gap
    assert gap.dtype == np.int64


def test_helical_rays_stop_where_the_particle_curls(geometry: DetectorGeometry) -> None:
    # A 0.1 GeV track in 2 T has a radius of curvature of 167 mm: it never gets beyond r = 333.
    pairs = adjacent_layer_pairs(geometry, ray_pt=(0.1,), n_eta=801)
    assert len(pairs) > 0
    assert max(geometry.layers[b].r_min for _, b in pairs.tolist()) < 2 * 0.1 / (0.3 * 2.0) * 1e3
    names = _names(geometry, pairs)
    assert _chain(8, [2, 4, 6, 8]) <= names
    assert ((13, 2), (13, 4)) not in names  # r = 360 is out of reach
