"""acorn event files in and out: files made here with PyG ``Data`` and ``torch.save`` in both
namings, the restricted unpickler, malformed files, and the round trip through infer."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from partgnn.cli.main import main
from partgnn.data.detector.geometry import default_geometry
from partgnn.data.files.storage import GraphFile
from partgnn.data.formats.acorn import acorn_to_graph, load_acorn_file
from partgnn.data.graphs.graph_builder import GraphBuildConfig, build_event_graph
from partgnn.data.simulation.simulate import SimulationConfig, simulate_events
from partgnn.errors import InputError


@pytest.fixture(scope="module")
def built() -> list[Data]:
    """Two simulated pile-up-5 events' graphs, built here: what the acorn files are made of."""
    geometry = default_geometry()
    events = simulate_events(geometry, SimulationConfig(pileup=5.0), n_events=2, seed=3)
    return [build_event_graph(event, geometry, GraphBuildConfig())[0] for event in events]


#: A shipped model reading hit positions only (``pretrained:trackml-full`` reads TrackML's
#: cluster shapes too, fields these files do not carry).
POSITIONS_MODEL = "pretrained:trackml-pt1"


def acorn_fields(graph: Data, naming: str, seed: int = 0) -> dict[str, object]:
    """An acorn event of ``graph``: edges shuffled and a third turned round (acorn's order and
    directions are its own), every true edge a track edge, plus two track edges the graph
    lacks (track_to_edge_map -1); pT in MeV; extra per-hit and per-track fields."""
    rng = np.random.default_rng(seed)
    n_nodes, n_edges = graph.num_nodes, graph.edge_index.shape[1]
    order = rng.permutation(n_edges)
    edge_index = graph.edge_index[:, order].clone()
    turn = torch.from_numpy(rng.random(n_edges) < 0.3)
    edge_index[:, turn] = edge_index.flip(0)[:, turn]
    y = graph.y[order].bool()
    true = torch.nonzero(y).flatten()
    track_edges = graph.edge_index[:, order][:, true]
    track_map = true.clone()
    # Two hits of one particle that no edge joins: track edges missing from the graph.
    pid = graph.particle_id.numpy()
    missing = []
    for particle in np.unique(pid[pid != 0])[:2]:
        hits = np.flatnonzero(pid == particle)[:2]
        missing.append(hits)
    track_edges = torch.cat([track_edges, torch.from_numpy(np.array(missing).T)], dim=1)
    track_map = torch.cat([track_map, torch.tensor([-1, -1])])
    track_pid = graph.particle_id[track_edges[0]]
    track_pt = graph.particle_pt[track_edges[0]].double() * 1000.0  # MeV
    pos = graph.pos.double()
    r = torch.hypot(pos[:, 0], pos[:, 1])
    phi = torch.atan2(pos[:, 1], pos[:, 0])
    module = torch.from_numpy(rng.integers(0, 5000, n_nodes))
    if naming == "prefixed":
        return {
            "hit_x": pos[:, 0].float(), "hit_y": pos[:, 1].float(), "hit_z": pos[:, 2].float(),
            "hit_r": r.float(), "hit_phi": phi.float(), "hit_id": graph.hit_id,
            "hit_module_id": module, "edge_index": edge_index, "edge_y": y,
            "edge_dphi": torch.randn(n_edges), "track_edges": track_edges,
            "track_to_edge_map": track_map, "track_particle_id": track_pid,
            "track_particle_pt": track_pt.float(),
            "track_particle_nhits": torch.full((track_edges.shape[1],), 9),
            "event_id": f"{graph.event_id:09d}", "config": [{"stage": "graph_construction"}],
        }  # fmt: skip
    return {
        "r": r.float(), "phi": phi.float(), "z": pos[:, 2].float(), "hit_id": graph.hit_id,
        "module_id": module, "edge_index": edge_index, "y": y, "truth_map": track_map,
        "track_edges": track_edges, "particle_id": track_pid, "pt": track_pt.float(),
        "nhits": torch.full((track_edges.shape[1],), 9), "event_id": [str(graph.event_id)],
    }  # fmt: skip


def save_event(path: Path, fields: dict[str, object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = Data()
    for name, value in fields.items():
        data[name] = value
    torch.save(data, path)
    return path


def _one_line_error(capsys) -> str:
    """The error line, after any progress bar."""
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err, err
    last = err.splitlines()[-1]
    assert last.startswith("partgnn: error: ") and err.count("partgnn: error") == 1, err
    return last


@pytest.mark.parametrize("naming", ["prefixed", "plain"])
def test_import_gives_the_built_graph_and_keeps_every_field(
    built: list[Data], tmp_path: Path, naming: str, capsys
):
    folders = ("trainset", "testset")
    for graph, folder in zip(built, folders, strict=True):
        name = f"event{graph.event_id:09d}" + ("-graph" if naming == "prefixed" else "")
        save_event(tmp_path / "acorn" / folder / f"{name}.pyg", acorn_fields(graph, naming))
    out = tmp_path / "graphs.h5"
    assert main(["import-acorn", str(tmp_path / "acorn"), "--out", str(out)]) == 0
    assert "imported 2 acorn events" in capsys.readouterr().out
    with GraphFile(out) as graphs:
        assert graphs.event_ids == sorted(int(g.event_id) for g in built)
        for index, original in enumerate(sorted(built, key=lambda g: g.event_id)):
            graph, kept = graphs[index], graphs.extra(index)
            fields = acorn_fields(original, naming)
            order = np.random.default_rng(0).permutation(original.edge_index.shape[1])
            # The builder's edges in acorn's order, each directed inner to outer again.
            assert torch.equal(graph.edge_index, original.edge_index[:, order])
            assert torch.equal(graph.y, original.y[order])
            # Features recomputed from float32 positions: the builder's up to rounding.
            assert torch.allclose(graph.x, original.x, atol=1e-6)
            assert torch.allclose(graph.edge_attr, original.edge_attr[order], atol=2e-3, rtol=1e-4)
            assert torch.allclose(graph.edge_pt, original.edge_pt[order], rtol=1e-6)
            on_track = graph.particle_pt > 0
            assert torch.equal(graph.particle_id[on_track], original.particle_id[on_track])
            assert torch.equal(graph.hit_id, original.hit_id)
            flipped = kept.pop("edge_flipped")
            assert np.array_equal(flipped, (fields["edge_index"] != graph.edge_index)[0].numpy())
            module = "hit_module_id" if naming == "prefixed" else "module_id"
            assert np.array_equal(kept[module], fields[module].numpy())
            truth_map = "track_to_edge_map" if naming == "prefixed" else "truth_map"
            assert np.array_equal(kept[truth_map], fields[truth_map].numpy())
            quality = graphs.quality(index)
            assert quality["acorn_naming"] == naming and quality["track_edges_missing"] == 2
            n_tracks = int(original.y.sum()) + 2
            assert quality["efficiency"] == pytest.approx(1 - 2 / n_tracks)


def test_scores_and_tracks_go_back_as_acorn_files_and_evaluate_works(
    built: list[Data], tmp_path: Path, capsys
):
    for graph, folder in zip(built, ("valset", "testset"), strict=True):
        path = tmp_path / "acorn" / folder / f"event{graph.event_id:09d}-graph.pyg"
        save_event(path, acorn_fields(graph, "prefixed"))
    graphs, scores = tmp_path / "graphs.h5", tmp_path / "scores.h5"
    metrics, out = tmp_path / "metrics.json", tmp_path / "out"
    for command in (
        ["import-acorn", str(tmp_path / "acorn"), "--out", str(graphs)],
        ["infer", "--checkpoint", POSITIONS_MODEL, "--graphs", str(graphs),
         "--out", str(scores), "--device", "cpu"],
        ["evaluate", str(scores), "--graphs", str(graphs), "--out", str(metrics)],
        ["info", str(graphs)],
        ["export-acorn", str(scores), "--graphs", str(graphs), "--out", str(out),
         "--tracks", "junction", "--cut", "0.5"],
    ):  # fmt: skip
        assert main(command) == 0, capsys.readouterr().err
    result = json.loads(metrics.read_text())
    assert result["events"] == 2 and result["edge"]["n_true_edges"] > 0
    sources = {p: p.read_bytes() for p in (tmp_path / "acorn").rglob("*.pyg")}
    for over in (tmp_path / "acorn", tmp_path / "acorn" / "valset", tmp_path):
        argv = ["export-acorn", str(scores), "--graphs", str(graphs), "--out", str(over)]
        assert main(argv) == 2
        err = _one_line_error(capsys)
        assert "the output folder holds the acorn files" in err or "holds the input" in err, err
    assert {p: p.read_bytes() for p in (tmp_path / "acorn").rglob("*.pyg")} == sources
    project = tmp_path / "project"  # a user's folder: exporting there must not delete it
    for name in ("src/tracking.py", ".git/HEAD", "README"):
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(name)
    argv = ["export-acorn", str(scores), "--graphs", str(graphs), "--out", str(project)]
    assert main(argv) == 2
    assert _one_line_error(capsys) == (
        f"partgnn: error: {project}: holds what export-acorn did not write (.git/, README, src/), "
        "which replacing the folder would delete: move it out, or choose another --out"
    )
    assert sorted(p.name for p in project.rglob("*")) == [".git", "HEAD", "README", "src",
                                                          "tracking.py"]  # fmt: skip
    rerun = ["export-acorn", str(scores), "--graphs", str(graphs), "--out", str(out),
             "--tracks", "junction", "--cut", "0.5"]  # fmt: skip
    assert main(rerun) == 0, capsys.readouterr().err  # its own earlier output is replaced
    with GraphFile(graphs) as imported:
        for index, event_id in enumerate(imported.event_ids):
            folder = "valset" if index == 0 else "testset"
            written = load_acorn_file(out / folder / f"event{event_id:09d}-graph.pyg")
            original = load_acorn_file(
                tmp_path / "acorn" / folder / f"event{event_id:09d}-graph.pyg"
            )
            assert set(original) < set(written)
            assert torch.equal(written["edge_index"], original["edge_index"])
            n_edges, n_nodes = original["edge_index"].shape[1], original["hit_id"].shape[0]
            assert written["edge_scores"].shape == (n_edges,)
            assert ((written["edge_scores"] >= 0) & (written["edge_scores"] <= 1)).all()
            labels = written["hit_track_labels"]
            assert labels.shape == (n_nodes,) and labels.max() >= 0
            edge_labels = written["edge_track_labels"]
            src, dst = original["edge_index"]
            kept = edge_labels >= 0
            assert torch.equal(edge_labels[kept], labels[src[kept]])
            assert torch.equal(labels[src[kept]], labels[dst[kept]])
            assert (
                not (labels[src[~kept]] == labels[dst[~kept]])
                .logical_and(labels[src[~kept]] >= 0)
                .any()
            )


class _RunsCode:
    """Pickles as a call of os.system: what an unrestricted torch.load would run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_file_that_would_run_code_is_refused(built: list[Data], tmp_path: Path, capsys):
    marker = tmp_path / "ran"
    fields = acorn_fields(built[0], "prefixed")
    fields["config"] = _RunsCode(marker)
    save_event(tmp_path / "acorn" / "event000000001.pyg", fields)
    code = main(["import-acorn", str(tmp_path / "acorn"), "--out", str(tmp_path / "g.h5")])
    assert code == 2
    err = _one_line_error(capsys)
    assert "event000000001.pyg: refused" in err and "system" in err
    assert not marker.exists() and not (tmp_path / "g.h5").exists()


def test_tensors_on_the_meta_device_are_one_line_naming_the_file(
    built: list[Data], tmp_path: Path, capsys
):
    fields = acorn_fields(built[0], "prefixed")
    fields["hit_z"] = fields["hit_z"].to("meta")
    save_event(tmp_path / "acorn" / "event000000001.pyg", fields)
    code = main(["import-acorn", str(tmp_path / "acorn"), "--out", str(tmp_path / "g.h5")])
    assert code == 2
    err = _one_line_error(capsys)
    assert "event000000001.pyg: field hit_z is a tensor on the meta device" in err, err
    assert not (tmp_path / "g.h5").exists()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda f: f.pop("track_edges"), "missing field 'track_edges'"),
        (lambda f: f.pop("edge_y"), "missing field 'edge_y'"),
        (lambda f: [f.pop(k) for k in ("edge_y", "hit_z")], "neither acorn naming"),
        (lambda f: f.update(edge_index=f["edge_index"] + 10**6), "edge_index refers to rows"),
        (lambda f: f.update(track_to_edge_map=f["track_to_edge_map"] - 5), "track_to_edge_map"),
        (lambda f: f.update(hit_id=f["hit_id"][:-1]), "hit_id has shape"),
        (lambda f: f.update(hit_z=f["hit_z"] * float("nan")), "NaN"),
    ],
    ids=["no-track-edges", "no-edge-truth", "no-naming", "out-of-range", "bad-map", "short", "nan"],
)
def test_malformed_fields_are_one_line_naming_the_file(
    built: list[Data], tmp_path: Path, damage, message: str
):
    fields = acorn_fields(built[0], "prefixed")
    damage(fields)
    path = save_event(tmp_path / "event000000001.pyg", fields)
    with pytest.raises(InputError, match=message) as error:
        acorn_to_graph(load_acorn_file(path), path=path)
    assert str(path) in str(error.value)


def test_files_that_are_not_acorn_events_are_one_line(tmp_path: Path, capsys):
    torn = tmp_path / "a" / "event000000001.pyg"
    torn.parent.mkdir()
    torn.write_bytes(b"PK\x03\x04 not a whole zip")
    assert main(["import-acorn", str(tmp_path / "a"), "--out", str(tmp_path / "g.h5")]) == 2
    assert "event000000001.pyg: not a readable torch.save file" in _one_line_error(capsys)
    plain = tmp_path / "b" / "event000000002.pyg"
    plain.parent.mkdir()
    torch.save({"edge_index": torch.zeros(2, 1, dtype=torch.long)}, plain)
    assert main(["import-acorn", str(tmp_path / "b"), "--out", str(tmp_path / "g.h5")]) == 2
    assert "holds a dict, not a PyG Data event" in _one_line_error(capsys)
    (tmp_path / "c").mkdir()
    assert main(["import-acorn", str(tmp_path / "c"), "--out", str(tmp_path / "g.h5")]) == 2
    assert "no acorn event files" in _one_line_error(capsys)


def test_a_folder_of_links_into_a_dataset_is_imported(built: list[Data], tmp_path: Path, capsys):
    """The usual layout on a shared cluster: a folder of symbolic links to the event files
    (issue 67: ``ValueError: ... is not in the subpath of ...``, nothing imported)."""
    dataset, links = tmp_path / "dataset" / "deep", tmp_path / "mine" / "trainset"
    links.mkdir(parents=True)
    for graph in built:
        name = f"event{graph.event_id:09d}-graph.pyg"
        save_event(dataset / name, acorn_fields(graph, "prefixed"))
        (links / name).symlink_to(dataset / name)
    out, scores, back = tmp_path / "graphs.h5", tmp_path / "scores.h5", tmp_path / "back"
    assert main(["import-acorn", str(tmp_path / "mine"), "--out", str(out)]) == 0
    assert "imported 2 acorn events" in capsys.readouterr().out
    with GraphFile(out) as graphs:
        assert len(graphs) == 2
    assert main(["infer", "--checkpoint", POSITIONS_MODEL, "--graphs", str(out),
                 "--out", str(scores), "--device", "cpu"]) == 0  # fmt: skip
    assert main(["export-acorn", str(scores), "--graphs", str(out), "--out", str(back)]) == 0
    assert sorted(p.name for p in (back / "trainset").iterdir()) == sorted(
        f"event{graph.event_id:09d}-graph.pyg" for graph in built
    )
