"""Simulated cells: the cluster every simulated hit leaves on its module, and its features.

A crossing deposits charge along its path through the module's collecting depth
(``depth_scale * module_t``), Landau-distributed around ``charge_per_mm`` per mm of path. The
charge drifts to the readout, moved sideways by the Lorentz angle where the field crosses the
drift (the barrels: ``lorentz * B_perp`` per unit depth; the cluster's centre stays at the
crossing), spread by diffusion, and is collected by the cells under it: ``K`` deposits evenly
along the path from end to end (two per cell the path spans and two more), each a share of the
charge at its own Gaussian offset. A cell under ``threshold`` is not read (the hit keeps its
largest); strips read 1 per cell, and each end of a strip cluster also fires its neighbour
with probability ``cross_talk``. Noise hits cross in a random direction (``cos`` of the
incidence uniform in [:data:`NOISE_MIN_COS`, 1]). The settings are each volume's
:class:`~partgnn.data.simulation.cell_response.CellResponse` (``configs/detector/trackml.yaml``:
calibrated on the real sample, ``tools/bench_cells.py``).

The clusters table comes from the simulated cells by the same code as a real event's
(:func:`~partgnn.data.formats.cluster_shapes.cluster_table`), so both carry the same columns.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from partgnn.data.detector.detector_modules import DetectorModules
from partgnn.data.detector.geometry import DetectorGeometry
from partgnn.data.event import Event
from partgnn.data.formats.cluster_shapes import (
    Cells,
    HitModules,
    cluster_spans,
    cluster_table,
    hit_modules,
)
from partgnn.data.simulation.cell_response import CellResponse

#: Deposits per cell the path spans, and the fewest and most per hit.
DEPOSITS_PER_CELL, MIN_DEPOSITS, MAX_DEPOSITS = 2, 2, 128
#: The smallest |cos| of the incidence a path is followed at (longer paths are capped).
MIN_COS = 0.02
#: Noise hits cross at ``cos`` of the incidence uniform in [NOISE_MIN_COS, 1] (the real
#: sample's noise clusters are the size of its signal ones).
NOISE_MIN_COS = 0.6
#: The mean of the standard Moyal distribution (the Landau's approximation drawn here): Euler's
#: gamma + ln 2.
_MOYAL_MEAN = 0.5772156649015329 + 0.6931471805599453
#: Bits of a cell's channel in the key that sorts cells (channels below 2**12).
_CHANNEL_BITS = 12


def can_simulate_cells(geometry: DetectorGeometry, modules: DetectorModules | None) -> bool:
    """Whether ``geometry`` gives everything cells need: a module table with thickness and
    pitch, and a cell response on every layer."""
    return (
        modules is not None
        and modules.has_readout
        and all(layer.cells is not None for layer in geometry.layers)
    )


def simulate_clusters(
    event: Event,
    geometry: DetectorGeometry,
    modules: DetectorModules,
    rng: np.random.Generator,
) -> pd.DataFrame:
    """The clusters table ``(N, 4)`` of a simulated event's hits (module docstring), from its
    truth: each hit's true position and momentum (noise: a random direction)."""
    cells, _ = event_cells(event, geometry, modules, rng)
    return cluster_table(cluster_spans(cells, len(event.hits)))


def event_cells(
    event: Event,
    geometry: DetectorGeometry,
    modules: DetectorModules,
    rng: np.random.Generator,
) -> tuple[Cells, HitModules]:
    """The simulated cells of an event's hits (as :func:`simulate_clusters` makes them), and
    the hits' modules."""
    hits, truth = event.hits, event.truth
    layer = geometry.layer_index(
        hits["volume_id"].to_numpy(), hits["layer_id"].to_numpy(), where=event.name
    )
    on = hit_modules(
        modules, layer, hits["module_id"].to_numpy(np.int64), where=event.name,
        hit_id=hits["hit_id"].to_numpy(np.int64),
    )  # fmt: skip
    position = truth[["tx", "ty", "tz"]].to_numpy(np.float64)
    momentum = truth[["tpx", "tpy", "tpz"]].to_numpy(np.float64)
    noise = truth["particle_id"].to_numpy() == 0
    return simulate_cells(geometry, layer, on, position, momentum, noise, rng), on


def simulate_cells(
    geometry: DetectorGeometry,
    layer: np.ndarray,
    on: HitModules,
    position: np.ndarray,
    momentum: np.ndarray,
    noise: np.ndarray,
    rng: np.random.Generator,
) -> Cells:
    """The cells of ``N`` hits (module docstring).

    Args:
        geometry: The detector; every layer has a cell response.
        layer: ``(N,)`` layer indices.
        on: The hits' modules.
        position: ``(N, 3)`` true crossing points [mm].
        momentum: ``(N, 3)`` momenta there (ignored for noise).
        noise: ``(N,)`` whether each hit is noise.
        rng: The cells' random stream.

    Returns:
        The cells, every hit with at least one.
    """
    n = len(layer)
    if n == 0:
        return Cells(np.zeros(0, np.int64), np.zeros((0, 2), np.int64), np.zeros(0))
    response = _per_hit(geometry, layer)
    direction = np.einsum("nji,nj->ni", on.rotation, momentum)
    direction = _random_directions(direction, noise, rng)
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    cos = np.maximum(np.abs(direction[:, 2]), MIN_COS)
    slope = direction[:, :2] / np.copysign(cos, direction[:, 2])[:, None]  # d(u, v) / d depth
    field_local = on.rotation[:, 2, :] * geometry.b_field  # B = (0, 0, Bz): its u, v, w parts
    drift = response["lorentz"][:, None] * np.column_stack([field_local[:, 1], -field_local[:, 0]])
    slope = slope - drift
    depth = response["depth_scale"] * on.thickness
    path = depth / cos
    moyal = -np.log(np.maximum(rng.standard_normal(n) ** 2, 1e-300))  # Moyal: -ln(chi2_1)
    charge = response["charge_per_mm"] * path
    charge *= np.maximum(1.0 + response["fluctuation"] * (moyal - _MOYAL_MEAN), 0.05)

    # Deposits: K per hit along the path's depth, each at its own diffusion offset, in cells.
    channels = on.channels
    span = slope * (depth[:, None] / on.pitch)  # the path's extent in cells (signed)
    deposits = np.clip(np.ceil(DEPOSITS_PER_CELL * np.abs(span).max(axis=1)) + MIN_DEPOSITS,
                       MIN_DEPOSITS, MAX_DEPOSITS).astype(np.int64)  # fmt: skip
    hit = np.repeat(np.arange(n), deposits)
    # In cells, float32 (a module has at most a few thousand cells, kept to 1e-3 of one): from
    # one end of the path to the other, so every cell the path crosses sees charge.
    centre = on.local(position)[:, :2]
    in_cells = (centre + on.half_size) / on.pitch
    start = (in_cells - 0.5 * span).astype(np.float32)
    step = (span / (deposits - 1)[:, None]).astype(np.float32)
    index = np.arange(len(hit), dtype=np.int64) - np.repeat(
        np.cumsum(deposits) - deposits, deposits
    )
    at = (
        np.repeat(start, deposits, axis=0)
        + np.repeat(step, deposits, axis=0) * index.astype(np.float32)[:, None]
    )
    spread = (response["diffusion"][:, None] / on.pitch).astype(np.float32)
    at += rng.standard_normal(size=at.shape, dtype=np.float32) * np.repeat(spread, deposits, 0)
    channel = np.floor(at).astype(np.int64)
    inside = ((channel >= 0) & (channel < np.repeat(channels, deposits, axis=0))).all(axis=1)
    share = np.repeat(charge / deposits, deposits)
    cells = _summed(hit[inside], channel[inside], share[inside])
    cells = _read_out(cells, response, in_cells, channels, charge)
    return _cross_talk(cells, response, channels, rng)


def _per_hit(geometry: DetectorGeometry, layer: np.ndarray) -> dict[str, np.ndarray]:
    """Each response setting ``(N,)`` of the hits' layers."""
    responses: list[CellResponse] = [la.cells for la in geometry.layers]  # type: ignore[misc]
    names = ("charge_per_mm", "fluctuation", "depth_scale", "lorentz", "diffusion", "threshold",
             "binary", "cross_talk")  # fmt: skip
    return {
        name: np.array([getattr(r, name) for r in responses], dtype=np.float64)[layer]
        for name in names
    }


def _random_directions(
    direction: np.ndarray, noise: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """``direction`` ``(N, 3)`` with the noise rows replaced by random local directions."""
    out = np.array(direction, dtype=np.float64, copy=True)
    count = int(noise.sum())
    if count:
        cos = rng.uniform(NOISE_MIN_COS, 1.0, count)
        phi = rng.uniform(-np.pi, np.pi, count)
        sin = np.sqrt(1.0 - cos**2)
        out[noise] = np.column_stack([sin * np.cos(phi), sin * np.sin(phi), cos])
    return out


def _key(hit: np.ndarray, channel: np.ndarray) -> np.ndarray:
    return (hit << (2 * _CHANNEL_BITS)) | (channel[:, 0] << _CHANNEL_BITS) | channel[:, 1]


def _summed(hit: np.ndarray, channel: np.ndarray, charge: np.ndarray) -> Cells:
    """Deposits summed per cell: one row per hit and channel pair, sorted by hit, then
    channel."""
    keys = _key(hit, channel)
    # Neighbouring deposits mostly share a cell: sum runs first, then sort what is left.
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    run_charge = np.add.reduceat(charge, starts) if len(starts) else charge[:0]
    keys, inverse = np.unique(keys[starts], return_inverse=True)
    charge = run_charge
    mask = (1 << _CHANNEL_BITS) - 1
    return Cells(
        hit=keys >> (2 * _CHANNEL_BITS),
        channel=np.column_stack([(keys >> _CHANNEL_BITS) & mask, keys & mask]),
        value=np.bincount(inverse, weights=charge, minlength=len(keys)),
    )


def _read_out(
    cells: Cells,
    response: dict[str, np.ndarray],
    in_cells: np.ndarray,
    channels: np.ndarray,
    charge: np.ndarray,
) -> Cells:
    """Cells (sorted by hit) under threshold dropped (each hit keeps its largest; a hit whose
    deposits all fell outside its module gets the cell of its crossing, ``in_cells`` ``(N,
    2)``), binary cells read 1; the result sorted by hit."""
    n = len(in_cells)
    hit, channel, value = cells.hit, cells.channel, cells.value
    threshold = response["threshold"][hit]
    if (threshold > 0).any():
        by_value = np.lexsort((-value, hit))  # each hit's largest cell first
        firsts = by_value[np.r_[True, hit[by_value][1:] != hit[by_value][:-1]]]
        keep = value >= threshold
        keep[firsts] = True
        hit, channel, value = hit[keep], channel[keep], value[keep]
    lost = np.flatnonzero(np.bincount(hit, minlength=n) == 0)
    if len(lost):
        own = np.clip(np.floor(in_cells[lost]).astype(np.int64), 0, channels[lost] - 1)
        order = np.argsort(np.concatenate([hit, lost]), kind="stable")
        hit = np.concatenate([hit, lost])[order]
        channel = np.concatenate([channel, own])[order]
        value = np.concatenate([value, charge[lost]])[order]
    value = np.where(response["binary"][hit] > 0, 1.0, value)
    return Cells(hit=hit, channel=channel, value=value)


def _cross_talk(
    cells: Cells, response: dict[str, np.ndarray], channels: np.ndarray, rng: np.random.Generator
) -> Cells:
    """Binary clusters' end cells along u firing their outer neighbours (``cross_talk``);
    ``cells`` sorted by hit, then channel."""
    probability = response["cross_talk"] * response["binary"]
    if not (probability > 0).any():
        return cells
    hit, channel = cells.hit, cells.channel
    starts = np.flatnonzero(np.r_[True, hit[1:] != hit[:-1]])
    ends = np.r_[starts[1:], len(hit)] - 1
    low, high = channel[starts], channel[ends]
    low_neighbour = low - np.array([1, 0])
    high_neighbour = high + np.array([1, 0])
    owner = hit[starts]
    fire_low = (rng.random(len(starts)) < probability[owner]) & (low_neighbour[:, 0] >= 0)
    fire_high = (rng.random(len(starts)) < probability[owner]) & (
        high_neighbour[:, 0] < channels[owner, 0]
    )
    added_hit = np.concatenate([owner[fire_low], owner[fire_high]])
    added = np.concatenate([low_neighbour[fire_low], high_neighbour[fire_high]])
    return Cells(
        hit=np.concatenate([cells.hit, added_hit]),
        channel=np.concatenate([cells.channel, added]),
        value=np.concatenate([cells.value, np.ones(len(added_hit))]),
    )
