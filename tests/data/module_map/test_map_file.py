"""Module-map graph construction: fitted from truth, stored, applied; bad maps refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from partgnn.cli.main import main
from partgnn.data.detector.geometry import default_geometry
from partgnn.data.files.storage import GraphFile
from partgnn.data.files.writers import write_events
from partgnn.data.graphs.graph_builder import build_event_graph, module_doublets
from partgnn.data.module_map.edges import module_map_edges
from partgnn.data.module_map.fit import fit_module_map
from partgnn.data.module_map.map_file import ModuleMap, pair_features, triplet_features
from partgnn.data.simulation.simulate import SimulationConfig, simulate_event, simulate_events
from partgnn.errors import InputError


@pytest.fixture(scope="module")
def events() -> list:
    geometry = default_geometry()
    return list(simulate_events(geometry, SimulationConfig(pileup=3.0), n_events=3, seed=8))


def test_a_map_fitted_on_an_event_rebuilds_its_true_doublets(events, tmp_path: Path):
    geometry = default_geometry()
    module_map = fit_module_map([module_doublets(events[0], geometry)])
    module_map.save(tmp_path / "map.npz")
    loaded = ModuleMap.load(tmp_path / "map.npz")
    assert len(loaded) == len(module_map) > 100
    assert np.array_equal(loaded.low, module_map.low) and loaded.settings["window"] == "minmax"
    graph, quality = build_event_graph(events[0], geometry, module_map=loaded)
    # Every true doublet of the training event lies inside its own pair's [min, max].
    assert quality.n_true_edges == quality.n_true_pairs
    src, dst = graph.edge_index
    assert (graph.pos[dst, 0] ** 2 + graph.pos[dst, 1] ** 2 >= graph.pos[src, 0] ** 2
            + graph.pos[src, 1] ** 2).all()  # fmt: skip
    geometric, _ = build_event_graph(events[0], geometry)
    assert graph.x.shape == geometric.x.shape and graph.edge_attr.shape[1] == 7


@pytest.mark.parametrize("window", ["minmax", "rms"])
def test_the_streaming_fit_equals_statistics_over_all_doublets(events, window: str):
    geometry = default_geometry()
    doublets = [module_doublets(event, geometry) for event in events]
    one_by_one = fit_module_map(doublets, window=window, width=2.0, chunk_doublets=1)
    at_once = fit_module_map(doublets, window=window, width=2.0, chunk_doublets=10**9)
    assert np.array_equal(one_by_one.source, at_once.source)
    assert np.array_equal(one_by_one.count, at_once.count)
    assert np.allclose(one_by_one.low, at_once.low) and np.allclose(one_by_one.high, at_once.high)
    # Check one busy pair against numpy over its doublets.
    source = np.concatenate([d[0] for d in doublets])
    target = np.concatenate([d[1] for d in doublets])
    features = np.concatenate([d[2] for d in doublets])
    k = int(np.argmax(at_once.count))
    mine = features[(source == at_once.source[k]) & (target == at_once.target[k])]
    assert len(mine) == at_once.count[k] >= 2
    if window == "rms":
        expected = mine.mean(axis=0) - 2.0 * mine.std(axis=0)
    else:
        expected = mine.min(axis=0) - 2.0 * (mine.max(axis=0) - mine.min(axis=0))
    assert np.allclose(at_once.low[k], expected)


def test_chunked_candidates_give_the_edges_of_one_pass(events, monkeypatch):
    from partgnn.data.module_map import map_file as module_map_module
    from partgnn.data.module_map.map_file import module_keys

    geometry = default_geometry()
    module_map = fit_module_map([module_doublets(event, geometry) for event in events], width=0.5)
    hits = events[1].hits
    layer = geometry.layer_index(hits["volume_id"].to_numpy(), hits["layer_id"].to_numpy())
    module = module_keys(layer, hits["module_id"].to_numpy())
    xyz = hits[["x", "y", "z"]].to_numpy(np.float64)
    whole = module_map_edges(module_map, module, xyz)
    # Brute force: every candidate's features against its pair's windows.
    pairs = zip(module_map.source.tolist(), module_map.target.tolist(), strict=True)
    pair_of = {pair: i for i, pair in enumerate(pairs)}
    expected = []
    for a in range(len(module)):
        for b in range(len(module)):
            i = pair_of.get((module[a], module[b]))
            if i is not None:
                f = pair_features(xyz, np.array([a]), np.array([b]))[0]
                if ((f >= module_map.low[i]) & (f <= module_map.high[i])).all():
                    expected.append((i, a, b))
    found = zip(whole[0].tolist(), whole[1].tolist(), strict=True)
    assert sorted(found) == sorted((a, b) for _, a, b in expected)
    assert len(expected) > 50
    monkeypatch.setattr(module_map_module, "CHUNK_CANDIDATES", 7)
    chunked = module_map_edges(module_map, module, xyz)
    assert np.array_equal(chunked[0], whole[0]) and np.array_equal(chunked[1], whole[1])


def test_windows_keep_only_pairs_inside_them():
    xyz = np.array([[100.0, 0, 0], [200.0, 1.0, 5.0], [200.0, 30.0, 5.0]])
    module = np.array([1, 2, 2])
    module_map = fit_module_map([(module[[0]], module[[1]], pair_features(xyz, [0], [1]))])
    first, second = module_map_edges(module_map, module, xyz)
    assert first.tolist() == [0] and second.tolist() == [1]  # hit 2 is outside dphi's window
    wide = fit_module_map(
        [(module[[0]], module[[1]], pair_features(xyz, [0], [1]))], window="rms", width=3.0
    )
    assert module_map_edges(wide, module, xyz)[0].tolist() == [0]  # rms of one doublet is 0


def test_the_floor_widens_windows_by_the_typical_width_of_busy_pairs():
    rng = np.random.default_rng(0)
    busy = rng.normal(size=(25, 4))
    lone = np.array([[1.0, 2.0, 3.0, 4.0]])
    doublets = [
        (np.full(25, 1), np.full(25, 2), busy),
        (np.array([3]), np.array([4]), lone),
    ]
    module_map = fit_module_map(doublets, floor=0.5)
    typical = busy.max(axis=0) - busy.min(axis=0)  # the only busy pair: its width is the median
    lone_row = np.flatnonzero(module_map.source == 3)[0]
    assert np.allclose(module_map.low[lone_row], lone[0] - 0.5 * typical)
    assert np.allclose(module_map.high[lone_row], lone[0] + 0.5 * typical)
    assert module_map.settings["floor"] == 0.5
    with pytest.raises(InputError, match="no module pair has 20 doublets"):
        fit_module_map(doublets[1:], floor=0.5)
    # One floor per quantity (z0, dphi, phi_slope, deta).
    per_feature = np.array([0.25, 0.1, 0.0, 1.0])
    module_map = fit_module_map(doublets, floor=per_feature.tolist())
    assert np.allclose(module_map.low[lone_row], lone[0] - per_feature * typical)
    assert np.allclose(module_map.high[lone_row], lone[0] + per_feature * typical)
    assert module_map.settings["floor"] == per_feature.tolist()
    for bad in ([0.1, 0.2], [0.1, -0.1, 0.1, 0.1]):
        with pytest.raises(InputError, match="one value >= 0 or one per window feature"):
            fit_module_map(iter(()), floor=bad)  # refused before any doublet is read


def test_fit_and_build_commands(events, tmp_path: Path, capsys):
    from partgnn.data.files.writers import write_events

    write_events(tmp_path / "e.h5", events)
    out_map, graphs = tmp_path / "map.npz", tmp_path / "g.h5"
    assert main(["fit-module-map", str(tmp_path / "e.h5"), "--out", str(out_map)]) == 0
    said = capsys.readouterr()
    assert "module pairs" in said.out
    # 3 small events: most pairs are seen once, so a new event falls largely outside the map.
    assert "warning: the map is thin for its data:" in said.err
    assert main(["build-graphs", str(tmp_path / "e.h5"), "--method", "module-map", "--map",
                 str(out_map), "--out", str(graphs)]) == 0  # fmt: skip
    # Hits of particles below the map's pT cut, and noise, lie on modules it never saw.
    assert "of the hits lie on modules the map never saw (fitted on 3 events)" in (
        capsys.readouterr().err
    )
    with GraphFile(graphs) as built:
        assert len(built) == 3 and built.attrs["method"] == "module-map"
        assert all(built.quality(i)["efficiency"] == 1.0 for i in range(3))
    # --floor reaches the fit: these tiny events have no pair seen 20 times to set it from.
    code = main(["fit-module-map", str(tmp_path / "e.h5"), "--floor", "0.5", "--out",
                 str(tmp_path / "floored.npz")])  # fmt: skip
    assert code == 2 and "no module pair has 20 doublets" in capsys.readouterr().err
    code = main(["fit-module-map", str(tmp_path / "e.h5"), "--floor", "0.5", "0.1", "--out",
                 str(tmp_path / "floored.npz")])  # fmt: skip
    assert code == 2 and "one per window feature" in capsys.readouterr().err
    assert main(["fit-module-map", str(tmp_path / "e.h5"), "--triplets", "--width", "0.5",
                 "--out", str(tmp_path / "t.npz")]) == 0  # fmt: skip
    assert " triplets from " in capsys.readouterr().out
    assert ModuleMap.load(tmp_path / "t.npz").triplets is not None
    assert main(["build-graphs", str(tmp_path / "e.h5"), "--method", "module-map", "--map",
                 str(tmp_path / "t.npz"), "--out", str(tmp_path / "gt.h5")]) == 0  # fmt: skip
    with GraphFile(tmp_path / "gt.h5") as built, GraphFile(graphs) as doublets_only:
        assert sum(built.n_edges(i) for i in range(3)) < sum(
            doublets_only.n_edges(i) for i in range(3)
        )


def test_bad_maps_are_one_line(tmp_path: Path, capsys):
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(InputError, match="not a module-map file"):
        ModuleMap.load(tmp_path / "junk.npz")
    np.savez(tmp_path / "other.npz", source=np.zeros(2))
    with pytest.raises(InputError, match="not a module-map file"):
        ModuleMap.load(tmp_path / "other.npz")
    with pytest.raises(InputError, match="module map not found"):
        ModuleMap.load(tmp_path / "missing.npz")
    code = main(["build-graphs", str(tmp_path / "e.h5"), "--map", str(tmp_path / "x.npz"),
                 "--out", str(tmp_path / "g.h5")])  # fmt: skip
    assert code == 2 and "--map goes with --method module-map" in capsys.readouterr().err


def test_triplets_keep_every_true_doublet_of_a_triplet_and_drop_others(events, tmp_path: Path):
    from partgnn.data.graphs.graph_builder import particle_properties, true_consecutive_pairs
    from partgnn.data.module_map.map_file import consecutive_triplets, module_keys

    geometry = default_geometry()
    fitted = fit_module_map(
        [module_doublets(event, geometry, triplets=True) for event in events], width=0.5
    )
    assert fitted.triplets is not None and len(fitted.triplets.count) > 100
    fitted.save(tmp_path / "map.npz")
    loaded = ModuleMap.load(tmp_path / "map.npz")
    assert np.array_equal(loaded.triplets.modules, fitted.triplets.modules)
    assert np.array_equal(loaded.triplets.low, fitted.triplets.low)
    doublets_only = fit_module_map([module_doublets(event, geometry) for event in events],
                                   width=0.5)  # fmt: skip
    assert np.array_equal(doublets_only.low, fitted.low)  # same pairs and windows

    event = events[1]
    hits = event.hits
    layer = geometry.layer_index(hits["volume_id"].to_numpy(), hits["layer_id"].to_numpy())
    module = module_keys(layer, hits["module_id"].to_numpy())
    xyz = hits[["x", "y", "z"]].to_numpy(np.float64)
    pairs_first, pairs_second = module_map_edges(doublets_only, module, xyz)
    first, second = module_map_edges(loaded, module, xyz)
    edges = set(zip(first.tolist(), second.tolist(), strict=True))
    assert edges < set(zip(pairs_first.tolist(), pairs_second.tolist(), strict=True))
    # Brute force: a doublet stays iff it is one of two doublets (a, b), (b, c) whose module
    # triplet is recorded, inside the triplet's windows.
    table = {tuple(m): i for i, m in enumerate(loaded.triplets.modules.tolist())}
    expected = set()
    for a, b in zip(pairs_first.tolist(), pairs_second.tolist(), strict=True):
        for b2, c in zip(pairs_first.tolist(), pairs_second.tolist(), strict=True):
            row = table.get((module[a], module[b], module[c])) if b2 == b else None
            if row is None:
                continue
            values = triplet_features(xyz, np.array([[a, b, c]]))[0]
            if ((values >= loaded.triplets.low[row]) & (values <= loaded.triplets.high[row])).all():
                expected |= {(a, b), (b, c)}
    assert edges == expected
    # Every true doublet that is part of a true triplet is kept.
    truth = event.truth["particle_id"].to_numpy().astype(np.int64)
    distance = np.linalg.norm(xyz - particle_properties(event, truth)[1], axis=1)
    true_triplets = consecutive_triplets(true_consecutive_pairs(truth, layer, distance))
    for a, b, c in true_triplets.tolist():
        assert (a, b) in edges and (b, c) in edges


def test_a_fit_can_leave_out_particles_produced_away_from_the_beam_line(tmp_path: Path, capsys):
    """``max_vertex_radius`` keeps the doublets of particles made within it (issue 50: a map
    fitted on every secondary's doublets has windows too wide), recorded in the map's
    settings only when given."""
    geometry = default_geometry()
    event = simulate_event(geometry, SimulationConfig(pileup=5, secondaries=True),
                           event_id=0, seed=8)  # fmt: skip
    particles = event.particles
    radius = dict(zip(particles["particle_id"], np.hypot(particles["vx"], particles["vy"]),
                      strict=True))  # fmt: skip
    every = module_doublets(event, geometry)
    near = module_doublets(event, geometry, max_vertex_radius=1.0)
    displaced = sum(
        max(n - 1, 0) for pid, n in zip(particles["particle_id"], particles["nhits"], strict=True)
        if radius[pid] > 1.0
    )  # fmt: skip
    assert displaced > 0 and len(near[0]) < len(every[0])
    events = tmp_path / "events.h5"
    write_events(events, [event])
    for extra, recorded in (([], None), (["--max-vertex-radius", "1"], 1.0)):
        out = tmp_path / f"map{len(extra)}.npz"
        assert main(["fit-module-map", str(events), *extra, "--out", str(out)]) == 0
        assert ModuleMap.load(out).settings.get("max_vertex_radius") == recorded
    capsys.readouterr()
