from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest
import torch
from torch_geometric.data import Data

from partgnn.data.event import TABLES
from partgnn.data.files.h5_files import file_sha256
from partgnn.data.files.output_files import atomic_output
from partgnn.data.files.storage import EventFile, GraphDataset, GraphFile, open_store
from partgnn.data.files.writers import write_events, write_graphs
from partgnn.errors import InputError
from tests.conftest import make_tiny_event


def _tiny_graph(event_id: int, n_nodes: int = 5, n_edges: int = 6) -> Data:
    generator = torch.Generator().manual_seed(event_id)
    return Data(
        x=torch.rand(n_nodes, 4, generator=generator),
        pos=torch.rand(n_nodes, 3, generator=generator),
        edge_index=torch.randint(0, n_nodes, (2, n_edges), generator=generator),
        edge_attr=torch.rand(n_edges, 5, generator=generator),
        y=(torch.rand(n_edges, generator=generator) > 0.5).float(),
        edge_pt=torch.rand(n_edges, generator=generator),
        hit_id=torch.arange(1, n_nodes + 1),
        particle_id=torch.arange(n_nodes) % 2,
        particle_pt=torch.rand(n_nodes, generator=generator),
        layer=torch.arange(n_nodes),
        event_id=event_id,
    )


def test_events_round_trip(tmp_path: Path):
    events = [make_tiny_event(3), make_tiny_event(11)]
    path = tmp_path / "events.h5"
    assert write_events(path, events, provenance={"source": "test", "config": {"a": 1}}) == 2
    with EventFile(path) as stored:
        assert len(stored) == 2
        assert stored.event_ids == [3, 11]
        assert stored.attrs["source"] == "test"
        assert stored.attrs["config"] == '{"a": 1}'
        for original, read in zip(events, stored, strict=True):
            assert read.event_id == original.event_id
            assert read.attrs == original.attrs
            for table_name, columns in TABLES.items():
                table = getattr(read, table_name)
                assert list(table.columns) == list(columns)
                pd.testing.assert_frame_equal(table, getattr(original, table_name))


def test_failed_write_leaves_no_file(tmp_path: Path):
    bad = make_tiny_event(2)
    bad.hits.loc[0, "x"] = np.nan
    path = tmp_path / "events.h5"
    with pytest.raises(InputError, match=r"hits.x is not finite at row 0"):
        write_events(path, [make_tiny_event(1), bad])
    assert list(tmp_path.iterdir()) == []


def test_duplicate_event_ids_are_rejected(tmp_path: Path):
    with pytest.raises(InputError, match="two events with event_id 1"):
        write_events(tmp_path / "e.h5", [make_tiny_event(1), make_tiny_event(1)])
    assert list(tmp_path.iterdir()) == []


def test_atomic_output_replaces_only_on_success(tmp_path: Path):
    path = tmp_path / "out.bin"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_output(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("crash")
    assert path.read_text() == "old"
    with atomic_output(path) as tmp:
        tmp.write_text("new")
    assert path.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_truncated_file_gives_one_clear_line(tmp_path: Path):
    path = tmp_path / "events.h5"
    write_events(path, [make_tiny_event(1)])
    data = path.read_bytes()
    truncated = tmp_path / "truncated.h5"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError) as info:
        EventFile(truncated)[0]
    message = str(info.value)
    assert str(truncated) in message and "\n" not in message


def test_wrong_format_version_and_missing_file(tmp_path: Path):
    path = tmp_path / "events.h5"
    write_events(path, [make_tiny_event(1)])
    with pytest.raises(InputError, match="not a partgnn-graphs file"):
        GraphFile(path)
    with h5py.File(path, "a") as h5:
        h5.attrs["format_version"] = 99
    with pytest.raises(InputError, match="format version 99"):
        EventFile(path)
    with pytest.raises(InputError, match="file not found"):
        EventFile(tmp_path / "missing.h5")
    plain = tmp_path / "plain.h5"
    with h5py.File(plain, "w") as h5:
        h5.attrs["format"] = "something-else"
    with pytest.raises(InputError, match="neither a partgnn events nor a graphs file"):
        open_store(plain)


def test_graphs_round_trip_and_dataset(tmp_path: Path):
    graphs = [_tiny_graph(1), _tiny_graph(2, n_nodes=7, n_edges=0)]
    path = tmp_path / "graphs.h5"
    qualities = [{"efficiency": 0.5, "n_edges": g.edge_index.shape[1]} for g in graphs]
    assert write_graphs(path, zip(graphs, qualities, strict=True), provenance={"p": 1}) == 2
    assert isinstance(open_store(path), GraphFile)
    dataset = GraphDataset(path)
    assert len(dataset) == 2
    for index, (original, quality) in enumerate(zip(graphs, qualities, strict=True)):
        read = dataset[index]
        assert read.event_id == original.event_id
        assert read.num_nodes == original.num_nodes
        for name in ("x", "pos", "edge_index", "edge_attr", "y", "edge_pt", "hit_id", "layer"):
            assert torch.equal(read[name], original[name].to(read[name].dtype)), name
        assert read.y.dtype == torch.float32
        assert dataset.graphs.quality(index)["efficiency"] == quality["efficiency"]


def test_dataset_works_in_dataloader_workers(tmp_path: Path):
    path = tmp_path / "graphs.h5"
    graphs = [_tiny_graph(i) for i in range(4)]
    write_graphs(path, ((g, {}) for g in graphs))
    loader = torch.utils.data.DataLoader(
        GraphDataset(path), batch_size=None, num_workers=2, collate_fn=lambda g: g
    )
    assert sorted(int(g.event_id) for g in loader) == [0, 1, 2, 3]


def test_out_of_range_edge_index_is_rejected(tmp_path: Path):
    graph = _tiny_graph(1)
    graph.edge_index[0, 0] = 99
    path = tmp_path / "graphs.h5"
    write_graphs(path, [(graph, {})])
    with pytest.raises(InputError, match="edge_index refers to nodes outside"):
        GraphFile(path)[0]


def test_file_sha256(tmp_path: Path):
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    assert file_sha256(path) == ("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
