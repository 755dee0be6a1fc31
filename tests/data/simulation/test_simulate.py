"""Tests of the event simulation: helix physics, realism against the real sample, determinism."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from partgnn.data.detector.geometry import default_geometry
from partgnn.data.event import HIT_COLUMNS, PARTICLE_COLUMNS, TRUTH_COLUMNS
from partgnn.data.simulation.digitisation import grid_module_ids
from partgnn.data.simulation.particles import PION
from partgnn.data.simulation.propagation import propagate, scatter
from partgnn.data.simulation.simulate import SimulationConfig, simulate_event, simulate_events
from partgnn.data.simulation.simulation_config import IDEAL_DETECTOR
from partgnn.errors import InputError

GEOMETRY = default_geometry()
BARREL_VOLUMES = {8, 13, 17}
# Ideal detector: no scattering, perfect resolution, no inefficiency, no noise, no overlapping
# modules.
IDEAL = SimulationConfig(
    pileup=2,
    multiple_scattering=False,
    resolution_scale=0.0,
    efficiency=1.0,
    noise_fraction=0.0,
    overlap_scale=0.0,
    **IDEAL_DETECTOR,  # a uniform field, hits on ideal surfaces, primaries only
)


def helix_radius(pt: np.ndarray) -> np.ndarray:
    """Transverse radius [mm] of a unit charge of transverse momentum ``pt`` [GeV]."""
    return 1000.0 * pt / (0.3 * GEOMETRY.b_field)


def fit_circle(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Algebraic (Kasa) least-squares circle fit; returns centre and radius."""
    x0, y0 = x.mean(), y.mean()  # centring keeps the normal equations well conditioned
    u, v = x - x0, y - y0
    a = np.stack([u, v, np.ones_like(u)], 1)
    (cu, cv, c), *_ = np.linalg.lstsq(a, u**2 + v**2, rcond=None)
    cu, cv = cu / 2, cv / 2
    return x0 + cu, y0 + cv, float(np.sqrt(c + cu**2 + cv**2))


def shoot(pt, eta=0.0, phi=0.3, q=1, vertex=(0.0, 0.0, 0.0), scattering=False, seed=0):
    """Propagates particles that differ only in the given (broadcast) parameters."""
    pt, eta, phi, q = np.broadcast_arrays(
        *(np.atleast_1d(a).astype(float) for a in (pt, eta, phi, q))
    )
    momenta = np.stack([pt * np.cos(phi), pt * np.sin(phi), pt * np.sinh(eta)], 1)
    return propagate(
        GEOMETRY,
        vertices=np.broadcast_to(np.asarray(vertex, dtype=float), momenta.shape),
        momenta=momenta,
        charges=q,
        masses=np.full(len(pt), PION[1]),
        multiple_scattering=scattering,
        rng=np.random.default_rng(seed),
    )


@pytest.fixture(scope="module")
def ideal_event():
    return simulate_event(GEOMETRY, IDEAL, event_id=3, seed=11)


@pytest.fixture(scope="module")
def event():
    return simulate_event(GEOMETRY, SimulationConfig(pileup=20), event_id=1, seed=5)


@pytest.fixture(scope="module")
def real(sample_dir):
    """The real sample event's tables, read with pandas directly."""
    return {
        name: pd.read_csv(sample_dir / f"event000000001-{name}.csv.gz")
        for name in ("hits", "truth", "particles")
    }


# --- helix physics -----------------------------------------------------------------------------


def test_true_hits_lie_on_a_circle_of_radius_pt_over_03b(ideal_event):
    hits, truth, particles = ideal_event.hits, ideal_event.truth, ideal_event.particles
    np.testing.assert_array_equal(
        hits[["x", "y", "z"]].to_numpy(), truth[["tx", "ty", "tz"]].to_numpy()
    )
    pt = np.hypot(particles["px"], particles["py"]).to_numpy()
    chosen = particles[(particles["nhits"] >= 6) & (pt > 0.2) & (pt < 2.0)]
    assert len(chosen) >= 20
    for row in chosen.itertuples():
        mine = truth[truth["particle_id"] == row.particle_id]
        x, y, z = (mine[c].to_numpy(np.float64) for c in ("tx", "ty", "tz"))
        xc, yc, radius = fit_circle(np.append(x, row.vx), np.append(y, row.vy))
        pt = np.hypot(row.px, row.py)
        assert radius == pytest.approx(helix_radius(pt), rel=1e-3)
        # z is linear in the turning angle, with slope R * pz / pt (from the vertex).
        turning = np.abs(
            np.unwrap(np.arctan2(y - yc, x - xc) - np.arctan2(row.vy - yc, row.vx - xc))
        )
        np.testing.assert_allclose(z - row.vz, turning * radius * row.pz / pt, atol=0.02)
        # Momentum is conserved without material and is tangent to the circle.
        tp = mine[["tpx", "tpy", "tpz"]].to_numpy(np.float64)
        np.testing.assert_allclose(np.hypot(tp[:, 0], tp[:, 1]), pt, rtol=1e-5)
        np.testing.assert_allclose(tp[:, 0] * (x - xc) + tp[:, 1] * (y - yc), 0, atol=1e-3 * radius)


def test_positive_particles_turn_clockwise_seen_from_plus_z():
    crossings = shoot(pt=[0.5, 0.5], q=[1, -1])
    for particle, expected_sign in ((0, -1), (1, 1)):
        xy = crossings.position[crossings.particle == particle, :2]
        (ax, ay), (bx, by) = xy[1] - xy[0], xy[2] - xy[1]
        turn = ax * by - ay * bx  # z of the cross product: < 0 is clockwise
        assert np.sign(turn) == expected_sign


def test_tracks_move_outwards_and_keep_their_momentum_magnitude():
    rng = np.random.default_rng(1)
    pt = 0.1 + rng.exponential(1.0, 300)
    crossings = shoot(
        pt=pt, eta=rng.uniform(-3, 3, 300), phi=rng.uniform(-3, 3, 300), scattering=True
    )
    frame = pd.DataFrame(
        {
            "particle": crossings.particle,
            "r": np.hypot(crossings.position[:, 0], crossings.position[:, 1]),
            "abs_z": np.abs(crossings.position[:, 2]),
            "p": np.linalg.norm(crossings.momentum, axis=1),
        }
    )
    grouped = frame.groupby("particle")
    assert grouped["r"].apply(lambda r: bool(np.all(np.diff(r.to_numpy()) > 0))).all()
    assert grouped["p"].apply(lambda p: np.ptp(p.to_numpy()) < 1e-9 * p.max()).all()


def test_particle_below_the_curl_up_threshold_never_reaches_the_layer():
    # A track from the beam line reaches at most r = 2R; 2R = 500 mm at pT = 0.15 GeV.
    threshold = 0.3 * GEOMETRY.b_field * 500.0 / 2000.0
    crossings = shoot(pt=[0.995 * threshold, 1.005 * threshold], eta=0.2)
    radius = np.round(np.hypot(crossings.position[:, 0], crossings.position[:, 1]))
    below, above = radius[crossings.particle == 0], radius[crossings.particle == 1]
    assert 360 in below and 500 not in below
    assert 500 in above and 660 not in above


def test_no_hit_beyond_the_apex(ideal_event):
    def radius_and_apex(event):
        truth = event.truth[event.truth["particle_id"] != 0]
        particles = event.particles.set_index("particle_id").loc[truth["particle_id"]]
        apex = 2 * helix_radius(np.hypot(particles["px"], particles["py"]).to_numpy())
        return np.hypot(truth["tx"], truth["ty"]).to_numpy(), apex

    # Without material pT is constant: a track from the beam spot never goes beyond r = 2R.
    radius, apex = radius_and_apex(ideal_event)
    assert (radius <= apex + 0.1).all()
    # Scattering turns some pz into pT (and back): the bound holds for nearly every hit (in a
    # uniform field, of tracks from the beam spot).
    scattered = SimulationConfig(pileup=20, **IDEAL_DETECTOR)
    radius, apex = radius_and_apex(simulate_event(GEOMETRY, scattered, event_id=1, seed=5))
    assert (radius <= 1.05 * apex + 0.1).mean() > 0.995


def test_central_particles_from_near_the_origin_only_hit_barrel_volumes(event):
    particles = event.particles
    eta = np.arcsinh(particles["pz"] / np.hypot(particles["px"], particles["py"]))
    central = particles.loc[(np.abs(eta) < 0.5) & (np.abs(particles["vz"]) < 100), "particle_id"]
    assert len(central) > 50
    volumes = set(event.hits.loc[event.truth["particle_id"].isin(central), "volume_id"])
    assert volumes == BARREL_VOLUMES


def test_highland_kick_has_the_expected_width():
    n, p, material = 20000, 1.0, 0.02
    mom = np.tile([p, 0.0, 0.0], (n, 1))
    pos = np.tile([100.0, 0.0, 0.0], (n, 1))  # normal incidence on a barrel layer
    mass = np.full(n, PION[1])
    kicked = scatter(
        mom, pos, mass, np.full(n, material), np.ones(n, bool), np.random.default_rng(0)
    )
    beta = p / np.hypot(p, PION[1])
    theta0 = 0.0136 / (beta * p) * np.sqrt(material) * (1 + 0.038 * np.log(material / beta**2))
    angle_y, angle_z = kicked[:, 1] / kicked[:, 0], kicked[:, 2] / kicked[:, 0]
    assert np.std(angle_y) == pytest.approx(theta0, rel=0.03)
    assert np.std(angle_z) == pytest.approx(theta0, rel=0.03)
    np.testing.assert_allclose(np.linalg.norm(kicked, axis=1), p)


# --- the event as a table ------------------------------------------------------------------------


def test_event_has_the_trackml_columns_and_conventions(event):
    event.validate()
    assert list(event.hits.columns) == list(HIT_COLUMNS)
    assert list(event.truth.columns) == list(TRUTH_COLUMNS)
    assert list(event.particles.columns) == list(PARTICLE_COLUMNS)
    hits, truth, particles = event.hits, event.truth, event.particles
    np.testing.assert_array_equal(hits["hit_id"], np.arange(1, len(hits) + 1))
    keys = hits[["volume_id", "layer_id", "module_id"]].to_numpy()
    assert (np.diff(keys[:, 0] * 10**6 + keys[:, 1] * 10**4 + keys[:, 2]) >= 0).all()
    assert particles["particle_id"].is_unique and (particles["particle_id"] > 0).all()
    counts = truth.loc[truth["particle_id"] != 0, "particle_id"].value_counts()
    np.testing.assert_array_equal(
        particles.set_index("particle_id")["nhits"].loc[counts.index], counts.to_numpy()
    )
    assert particles["nhits"].sum() == (truth["particle_id"] != 0).sum()
    noise = truth[truth["particle_id"] == 0]
    assert (noise[["tpx", "tpy", "tpz", "weight"]].to_numpy() == 0).all()
    np.testing.assert_array_equal(
        noise[["tx", "ty", "tz"]].to_numpy(), hits.loc[noise.index, ["x", "y", "z"]].to_numpy()
    )
    nhits_of_hit = (
        particles.set_index("particle_id")["nhits"].reindex(truth["particle_id"]).to_numpy()
    )
    scored = (truth["particle_id"].to_numpy() != 0) & (nhits_of_hit >= 3)
    assert (truth["weight"].to_numpy()[~scored] == 0).all()
    assert np.ptp(truth["weight"].to_numpy()[scored]) < 1e-9
    assert truth["weight"].sum() == pytest.approx(1.0, rel=1e-5)
    assert set(np.abs(particles["particle_type"])) == {211, 321, 2212}
    np.testing.assert_array_equal(np.sign(particles["particle_type"]), particles["q"])
    assert event.attrs["source"] == "simulation" and event.attrs["seed"] == 5
    assert event.attrs["pileup"] == 20
    assert SimulationConfig.from_json(event.attrs["config"]) == SimulationConfig(pileup=20)
    ideal = SimulationConfig(pileup=20, **IDEAL_DETECTOR)  # its record names no switch
    assert SimulationConfig.from_json(ideal.to_json()) == ideal


def test_hits_are_smeared_by_the_layer_resolution(event):
    hits, truth = event.hits, event.truth
    signal = (truth["particle_id"] != 0).to_numpy()
    pixel_barrel = signal & (hits["volume_id"] == 8).to_numpy()
    dz = (hits["z"] - truth["tz"]).to_numpy()[pixel_barrel]
    r = np.hypot(truth["tx"], truth["ty"]).to_numpy()[pixel_barrel]
    dphi = np.angle(
        np.exp(1j * (np.arctan2(hits["y"], hits["x"]) - np.arctan2(truth["ty"], truth["tx"])))
    )[pixel_barrel]
    sigma_rphi, sigma_z = GEOMETRY.layers[GEOMETRY.layer_index([8], [2])[0]].resolution
    # float32 storage adds ~3 um of rounding on z ~ 100 mm; compare loosely.
    assert np.std(r * dphi) == pytest.approx(sigma_rphi, rel=0.15)
    assert np.std(dz) == pytest.approx(sigma_z, rel=0.3)


def test_module_ids_bin_phi_and_z():
    layer = int(GEOMETRY.layer_index([8], [2])[0])  # r = 32 mm: round(2 pi 32 / 30) = 7 sectors
    edge = -np.pi + 2 * np.pi / 7
    phi = np.array([edge - 1e-3, edge + 1e-3, edge + 1e-3])
    z = np.array([0.0, 0.0, 100.0])
    position = np.stack([32 * np.cos(phi), 32 * np.sin(phi), z], 1)
    modules = grid_module_ids(GEOMETRY, np.full(3, layer), position)
    assert modules[0] == modules[1] - 1
    assert modules[2] > modules[1] and (modules[2] - modules[1]) % 7 == 0
    assert (modules >= 1).all()


# --- realism against the real TrackML sample event ------------------------------------------------


def test_simulated_event_looks_like_the_real_sample(event, real):
    sim_hits, sim_truth, sim_particles = event.hits, event.truth, event.particles
    hits, truth, particles = real["hits"], real["truth"], real["particles"]

    assert set(sim_hits["volume_id"]) == set(hits["volume_id"])
    sim_r, r = np.hypot(sim_hits["x"], sim_hits["y"]), np.hypot(hits["x"], hits["y"])
    assert sim_r.max() == pytest.approx(r.max(), rel=0.02)
    assert sim_r.min() == pytest.approx(r.min(), abs=3.0)
    assert np.abs(sim_hits["z"]).max() == pytest.approx(np.abs(hits["z"]).max(), rel=0.01)
    # Share of hits per volume; the real strip barrel has more (overlapping modules, see below).
    for volume, share in (hits["volume_id"].value_counts(normalize=True)).items():
        assert (sim_hits["volume_id"] == volume).mean() == pytest.approx(share, abs=0.07), volume

    noise = (truth["particle_id"] == 0).mean()
    assert (sim_truth["particle_id"] == 0).mean() == pytest.approx(noise, abs=0.02)

    # Overlapping modules: two hits on one layer for ~28% of (particle, layer) pairs, so a
    # pT > 1 GeV particle leaves a median 12 hits on ~9 layers, in the real sample as simulated.
    sim_pt = np.hypot(sim_particles["px"], sim_particles["py"])
    pt = np.hypot(particles["px"], particles["py"])
    sim_counts = _hits_per_particle(sim_truth, sim_particles.loc[sim_pt > 1, "particle_id"])
    real_counts = _hits_per_particle(truth, particles.loc[pt > 1, "particle_id"])
    assert sim_counts.median() == pytest.approx(real_counts.median(), abs=1)
    assert sim_counts.mean() == pytest.approx(real_counts.mean(), rel=0.08)
    assert _two_hit_layer_share(sim_hits, sim_truth) == pytest.approx(
        _two_hit_layer_share(hits, truth), abs=0.04
    )
    # Over all particles with hits the simulation has ~14% more: its low-pT particles cross
    # more layers (no energy loss or hadronic interactions are simulated).
    sim_all = sim_particles.loc[sim_particles["nhits"] > 0, "nhits"].mean()
    assert sim_all == pytest.approx(particles.loc[particles["nhits"] > 0, "nhits"].mean(), rel=0.2)
    for q in (50, 90):
        assert np.percentile(sim_pt, q) == pytest.approx(np.percentile(pt, q), rel=0.2)


def _hits_per_particle(truth: pd.DataFrame, particle_ids: pd.Series) -> pd.Series:
    """Hits of each of ``particle_ids`` counted from the truth rows."""
    return truth.loc[truth["particle_id"].isin(particle_ids), "particle_id"].value_counts()


def _two_hit_layer_share(hits: pd.DataFrame, truth: pd.DataFrame) -> float:
    """Share of (particle, layer) pairs with two or more hits (overlapping modules)."""
    signal = hits.assign(particle_id=truth["particle_id"].to_numpy())
    signal = signal[signal["particle_id"] != 0]
    return float((signal.groupby(["particle_id", "volume_id", "layer_id"]).size() >= 2).mean())


def test_overlapping_modules_give_second_hits_offset_along_the_layer_normal():
    config = dataclasses.replace(IDEAL, overlap_scale=1.0)
    event = simulate_event(GEOMETRY, config, event_id=3, seed=11)
    without = simulate_event(GEOMETRY, IDEAL, event_id=3, seed=11)
    hits = event.hits.assign(particle_id=event.truth["particle_id"].to_numpy())
    hits["r"] = np.hypot(hits["x"], hits["y"])
    groups = hits.groupby(["particle_id", "volume_id", "layer_id"])
    assert len(groups) == len(without.hits)  # the same crossings, some with a second hit
    doubles = groups.filter(lambda g: len(g) == 2)
    assert 0.15 < len(doubles) / 2 / len(groups) < 0.45
    layers = {(la.volume_id, la.layer_id): la for la in GEOMETRY.layers}
    at_offset = []
    for (_, volume_id, layer_id), pair in doubles.groupby(["particle_id", "volume_id", "layer_id"]):
        layer = layers[(volume_id, layer_id)]
        normal = pair["r"] if layer.is_barrel else pair["z"].abs()
        spacing = normal.max() - normal.min()
        # float32 positions: a few micrometres of rounding at r ~ 1 m. Grazing tracks have
        # their path in the module plane capped, so they get less.
        assert spacing <= layer.overlap_offset + 2e-3
        at_offset.append(abs(spacing - layer.overlap_offset) <= 2e-3)
        assert pair["module_id"].nunique() == 2
    assert np.mean(at_offset) > 0.95


# --- determinism and scale ------------------------------------------------------------------------


def assert_same_event(a, b):
    assert a.event_id == b.event_id and a.attrs == b.attrs
    for table in ("hits", "truth", "particles"):
        pd.testing.assert_frame_equal(getattr(a, table), getattr(b, table))


def test_same_seed_same_event_and_different_seeds_differ():
    config = SimulationConfig(pileup=3)
    a = simulate_event(GEOMETRY, config, event_id=4, seed=9)
    assert_same_event(a, simulate_event(GEOMETRY, config, event_id=4, seed=9))
    b = simulate_event(GEOMETRY, config, event_id=4, seed=10)
    c = simulate_event(GEOMETRY, config, event_id=5, seed=9)
    for other in (b, c):
        assert len(other.hits) != len(a.hits) or not np.array_equal(other.hits["x"], a.hits["x"])


def test_event_k_does_not_depend_on_how_many_events_are_simulated():
    config = SimulationConfig(pileup=2)
    three = list(simulate_events(GEOMETRY, config, n_events=3, seed=2))
    assert [e.event_id for e in three] == [0, 1, 2]
    (alone,) = simulate_events(GEOMETRY, config, n_events=1, seed=2, first_event_id=2)
    assert_same_event(three[2], alone)


def test_pileup_one_gives_about_fifty_particles():
    config = SimulationConfig(pileup=1)
    counts = [
        len(simulate_event(GEOMETRY, config, event_id=k, seed=0).particles) for k in range(40)
    ]
    assert np.mean(counts) == pytest.approx(50, abs=4)


def test_pileup_200_gives_ten_thousand_particles_and_a_hundred_thousand_hits():
    event = simulate_event(GEOMETRY, SimulationConfig(), event_id=0, seed=0)
    assert 9000 < len(event.particles) < 11000
    # ~9 layers crossed per particle, a second hit on ~28% of them (overlapping modules).
    assert 80_000 < len(event.hits) < 150_000
    assert (event.truth["particle_id"] == 0).mean() == pytest.approx(0.15, abs=0.01)


def test_efficiency_override_drops_hits():
    full = simulate_event(GEOMETRY, IDEAL, event_id=0, seed=3)
    half = simulate_event(
        GEOMETRY,
        dataclasses.replace(IDEAL, efficiency=0.5),
        event_id=0,
        seed=3,
    )
    assert len(half.hits) / len(full.hits) == pytest.approx(0.5, abs=0.05)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("pileup", 2.5),
        ("pileup", 0),
        ("noise_fraction", 1.0),
        ("efficiency", 1.5),
        ("pt_min", 0.0),
        ("beam_spot_sigma", (0.1, 0.1)),
        ("proton_fraction", 0.95),
    ],
)
def test_bad_config_is_one_clear_error(field, value):
    with pytest.raises(InputError, match=rf"simulation config: .*{field} must be"):
        SimulationConfig(**{field: value})


def test_negative_seed_is_rejected():
    with pytest.raises(InputError, match="seed"):
        simulate_event(GEOMETRY, IDEAL, event_id=0, seed=-1)


def test_an_event_without_particles_or_hits_is_still_valid():
    empty = simulate_event(
        GEOMETRY, SimulationConfig(pileup=1, particles_per_pileup=1e-9), event_id=0, seed=0
    )
    assert len(empty.particles) == 0 and len(empty.hits) == 0
    blind = simulate_event(GEOMETRY, SimulationConfig(pileup=1, efficiency=0.0), event_id=0, seed=0)
    assert len(blind.hits) == 0 and (blind.particles["nhits"] == 0).all()


#: numpy's vector code paths above AVX2 turned off (``NPY_DISABLE_CPU_FEATURES``): numpy as it
#: runs on an AVX2 CPU, and, with AVX2 and FMA3 off too, on a CPU of SSE4.2 only.
NUMPY_AS_ON = {
    "avx2": "AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR AVX512F AVX512CD",
    "sse4.2": "AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR AVX512F AVX512CD AVX2 "
    "FMA3 X86_V3",
}


SIMULATE = """
import hashlib, json, sys
from partgnn.data.detector.geometry import default_geometry
from partgnn.data.simulation.simulate import SimulationConfig, simulate_event
event = simulate_event(default_geometry(), SimulationConfig(pileup=10), seed=41, event_id=0)
tables = {"hits": event.hits, "truth": event.truth, "particles": event.particles}
print(json.dumps({f"{t}.{c}": hashlib.sha256(frame[c].to_numpy().tobytes()).hexdigest()
                  for t, frame in tables.items() for c in frame.columns}))
"""


def _column_hashes(env_extra: dict[str, str]) -> dict[str, str]:
    """SHA-256 of every column of one simulated event, simulated in a process of its own."""
    import os
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", SIMULATE], env={**os.environ, **env_extra},
                          check=True, capture_output=True, text=True, timeout=120)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_simulation_is_bitwise_the_same_with_numpy_on_lesser_instruction_sets():
    """The events do not depend on numpy's vector code paths: the same bytes with them lowered
    to AVX2 or SSE4.2 on this machine (docs/history/library.md: also on another host with
    numpy 2.5.2 and torch 2.11, two pile-up-200 events bitwise equal)."""
    here = _column_hashes({})
    assert len(here) > 10
    for level, disabled in NUMPY_AS_ON.items():
        assert _column_hashes({"NPY_DISABLE_CPU_FEATURES": disabled}) == here, level


def test_module_planes_settings():
    """``module_planes`` keeps further modules with probability ``overlap_scale`` (at most 1),
    and is recorded only when on (events simulated before it keep their record)."""
    with pytest.raises(InputError, match=r"overlap_scale must be in \[0, 1\] with module_planes"):
        SimulationConfig(module_planes=True, overlap_scale=2.0)
    assert "module_planes" not in json.loads(SimulationConfig(module_planes=False).to_json())
    assert json.loads(SimulationConfig().to_json())["module_planes"] is True  # on by default
    geometry = default_geometry()
    config = SimulationConfig(pileup=5, module_planes=True, overlap_scale=0.0)
    one = simulate_event(geometry, config, event_id=2, seed=3)
    truth = one.hits.merge(one.truth, on="hit_id")
    truth = truth[truth["particle_id"] != 0]
    assert truth.groupby(["particle_id", "volume_id", "layer_id"]).size().max() == 1
