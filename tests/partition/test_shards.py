import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from partgnn.data.detector.geometry import default_geometry
from partgnn.data.files.storage import GraphFile
from partgnn.data.files.writers import write_graphs
from partgnn.data.graphs.graph_builder import GraphBuildConfig, build_event_graph
from partgnn.data.graphs.graph_fields import NODE_FIELDS
from partgnn.data.simulation.simulate import SimulationConfig, simulate_event
from partgnn.errors import InputError
from partgnn.partition.event_split import PartitionOptions
from partgnn.partition.shard_meta import meta_checksum
from partgnn.partition.shard_reader import ShardDirectory, shard_path
from partgnn.partition.shard_writer import write_shards


@pytest.fixture(scope="module")
def graphs_file(tmp_path_factory) -> Path:
    geometry = default_geometry()
    config = SimulationConfig(pileup=10)
    graphs = (
        build_event_graph(
            simulate_event(geometry, config, event_id=event_id, seed=4),
            geometry,
            GraphBuildConfig(pt_min=0.5),
        )
        for event_id in (3, 8)
    )
    path = tmp_path_factory.mktemp("shards") / "graphs.h5"
    write_graphs(path, ((graph, quality.to_dict()) for graph, quality in graphs))
    return path


def _rebuild(shards: ShardDirectory, index: int):
    events = []
    for rank in range(shards.n_parts):
        with shards.open_rank(rank) as shard:
            events.append(shard[index])
    return events


@pytest.mark.parametrize("method", ["metis", "phi", "phieta"])
def test_shards_hold_every_rank_share_of_every_event(graphs_file: Path, tmp_path: Path, method):
    out = tmp_path / "shards"
    meta = write_shards(
        graphs_file, out, PartitionOptions(n_parts=3, method=method), progress=False
    )
    assert meta.event_ids == [3, 8]
    shards = ShardDirectory(out, world_size=3)
    shards.check_source(graphs_file)
    with GraphFile(graphs_file) as graphs:
        for index, graph in enumerate(graphs):
            parts = _rebuild(shards, index)
            owned = np.concatenate([p.plan.owned_nodes for p in parts])
            assert np.array_equal(np.sort(owned), np.arange(graph.num_nodes))
            counted = np.concatenate([p.plan.edge_ids[p.plan.edge_owned] for p in parts])
            assert np.array_equal(np.sort(counted), np.arange(graph.edge_index.shape[1]))
            for part in parts:
                plan, local = part.plan, part.graph
                plan.validate()
                assert part.n_global_edges == graph.edge_index.shape[1]
                assert part.n_global_true_edges == int(graph.y.sum())
                nodes = torch.from_numpy(plan.local_nodes)
                for name in NODE_FIELDS:
                    assert torch.equal(local[name], graph[name][nodes]), name
                edges = torch.from_numpy(plan.edge_ids)
                assert torch.equal(local.y, graph.y[edges])
                assert torch.equal(local.edge_attr, graph.edge_attr[edges])
                global_edges = nodes[local.edge_index]
                assert torch.equal(global_edges, graph.edge_index[:, edges])


def test_output_is_reproducible_and_replaces_an_old_shard_directory(graphs_file, tmp_path):
    options = PartitionOptions(n_parts=2, method="metis", seed=7)
    first, second = tmp_path / "a", tmp_path / "b"
    write_shards(graphs_file, first, options, progress=False)
    write_shards(graphs_file, second, options, workers=2, progress=False)
    for name in ("meta.json", "part-00000.h5", "part-00001.h5"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    write_shards(graphs_file, first, PartitionOptions(n_parts=3, method="phi"), progress=False)
    assert sorted(p.name for p in first.iterdir()) == [
        "meta.json",
        "part-00000.h5",
        "part-00001.h5",
        "part-00002.h5",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]


def test_more_parts_than_nodes_and_isolated_nodes(tmp_path: Path):
    graph = Data(
        x=torch.zeros(3, 4),
        pos=torch.tensor([[1.0, 0, 0], [0, 1.0, 5], [-1.0, 0, -5]]),
        edge_index=torch.tensor([[0], [1]]),
        edge_attr=torch.zeros(1, 5),
        y=torch.ones(1),
        edge_pt=torch.ones(1),
        hit_id=torch.arange(3),
        particle_id=torch.tensor([1, 1, 0]),
        particle_pt=torch.ones(3),
        layer=torch.arange(3),
        event_id=0,
    )
    graphs = tmp_path / "tiny.h5"
    write_graphs(graphs, [(graph, {})])
    for method in ("metis", "phi", "eta", "phieta"):
        out = tmp_path / method
        write_shards(graphs, out, PartitionOptions(n_parts=5, method=method), progress=False)
        parts = _rebuild(ShardDirectory(out, world_size=5), 0)
        assert sum(p.plan.n_owned for p in parts) == 3
        assert sum(int(p.plan.edge_owned.sum()) for p in parts) == 1


def test_extended_sectors_are_stored_with_a_margin(graphs_file: Path, tmp_path: Path):
    out = tmp_path / "margin"
    write_shards(graphs_file, out, PartitionOptions(n_parts=2, margin=1), progress=False)
    parts = _rebuild(ShardDirectory(out), 0)
    with GraphFile(graphs_file) as graphs:
        n_edges = graphs[0].edge_index.shape[1]
    counted = torch.cat([p.sector.global_edges[p.sector.edge_owned] for p in parts])
    assert torch.equal(counted.sort().values, torch.arange(n_edges))
    for part in parts:
        assert part.sector.n_owned == part.plan.n_owned
        assert part.sector.num_nodes >= part.plan.n_owned


def test_bad_shard_directories_give_one_clear_line(graphs_file: Path, tmp_path: Path):
    out = tmp_path / "shards"
    write_shards(graphs_file, out, PartitionOptions(n_parts=2), progress=False)
    with pytest.raises(InputError, match="shards are for 2 ranks but the world size is 4"):
        ShardDirectory(out, world_size=4)
    other = tmp_path / "other.h5"
    other.write_bytes(graphs_file.read_bytes() + b"\0")
    with pytest.raises(InputError, match="made from another file"):
        ShardDirectory(out).check_source(other)
    shard_path(out, 1).unlink()
    with pytest.raises(InputError, match=r"part-00001\.h5: shard file missing"):
        ShardDirectory(out).open_rank(1)
    meta = json.loads((out / "meta.json").read_text())
    edited = {**meta, "source": {**meta["source"], "sha256": "0" * 64}}
    (out / "meta.json").write_text(json.dumps(edited))
    with pytest.raises(InputError, match=r"meta\.json: content does not match its checksum"):
        ShardDirectory(out)
    (out / "meta.json").write_text(json.dumps({**edited, "checksum": meta_checksum(edited)}))
    with pytest.raises(InputError, match=r"source_sha256 .* meta\.json says"):
        ShardDirectory(out).open_rank(0)
    (out / "meta.json").write_text(json.dumps({**meta, "format_version": 99}))
    with pytest.raises(InputError, match="format version 99"):
        ShardDirectory(out)
    (out / "meta.json").unlink()
    with pytest.raises(InputError, match=r"meta\.json: missing"):
        ShardDirectory(out)
    with pytest.raises(InputError, match="not a shard directory"):
        write_shards(graphs_file, out, PartitionOptions(n_parts=2), progress=False)
    with pytest.raises(InputError, match=r"parts must be >= 1 \(got 0\)"):
        write_shards(graphs_file, tmp_path / "x", PartitionOptions(n_parts=0), progress=False)
    assert not (tmp_path / "x").exists()
