"""Inputs that would run for hours or exhaust memory are refused up front with one line, exit 2:
more parts than an event has nodes, an absurd part count, an event id given twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from partgnn.cli.main import main
from partgnn.data.files.storage import GraphFile


@pytest.fixture
def data(tiny_pipeline: Path) -> Path:
    return tiny_pipeline


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("partgnn: error: "), err
    return err


def test_more_parts_than_the_smallest_event_has_nodes_is_refused(data: Path, tmp_path, capsys):
    with GraphFile(data / "graphs.h5") as graphs:
        smallest = min(graphs.shape(i).nodes for i in range(len(graphs)))
    out = tmp_path / "shards"
    code = main(["partition", str(data / "graphs.h5"), "--parts", str(smallest + 1), "--out",
                 str(out)])  # fmt: skip
    assert code == 2
    assert f"more than the {smallest} nodes of event" in _one_line(capsys)
    assert not out.exists()
    assert main(["partition", str(data / "graphs.h5"), "--parts", str(smallest), "--out",
                 str(out)]) == 0  # fmt: skip


def test_an_absurd_part_count_is_refused(data: Path, tmp_path, capsys):
    code = main(["partition", str(data / "graphs.h5"), "--parts", "1000000", "--out",
                 str(tmp_path / "shards")])  # fmt: skip
    assert code == 2 and "parts must be <= 4096" in _one_line(capsys)


def test_an_event_id_given_twice_is_refused(data: Path, capsys):
    graphs = data / "graphs.h5"
    scores = data / "scores.h5"
    assert main(["infer", "--checkpoint", "pretrained:trackml-pt1", "--graphs", str(graphs),
                 "--out", str(scores), "--device", "cpu"]) == 0  # fmt: skip
    with GraphFile(graphs) as graph_file:
        first = graph_file.event_ids[0]
    capsys.readouterr()
    code = main(["evaluate", str(scores), "--graphs", str(graphs), "--event-ids", str(first),
                 str(first)])  # fmt: skip
    assert code == 2 and f"event ids: {first} given more than once" in _one_line(capsys)
