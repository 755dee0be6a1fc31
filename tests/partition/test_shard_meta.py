"""A shard directory's meta.json: the record write_shards returns is the one its reader reads;
meta.json written before partgnn recorded the work imbalance still reads; a field a reader
relies on, missing or malformed, is refused in one line naming the file and the field."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from partgnn.data.files.writers import write_graphs
from partgnn.errors import InputError
from partgnn.partition.event_split import PartitionOptions
from partgnn.partition.shard_meta import ShardMeta, meta_checksum
from partgnn.partition.shard_writer import write_shards


@pytest.fixture(scope="module")
def shards(tmp_path_factory, event_graph) -> tuple[Path, ShardMeta]:
    folder = tmp_path_factory.mktemp("meta")
    write_graphs(folder / "graphs.h5", [(event_graph, {})])
    meta = write_shards(
        folder / "graphs.h5", folder / "shards", PartitionOptions(n_parts=3), progress=False
    )
    return folder / "shards", meta


def test_the_written_record_is_the_one_read(shards):
    directory, written = shards
    read = ShardMeta.read(directory)
    assert read == written
    assert read.n_parts == 3 and read.method == "metis" and read.source.path.endswith("graphs.h5")
    assert read.summary is not None and read.summary.events == 1
    (row,) = read.per_event
    assert sum(row.owned_nodes) == row.n_nodes and len(row.halo_nodes) == 3
    assert read.as_json() == json.loads((directory / "meta.json").read_text())


def _rewritten(directory: Path, tmp_path: Path, change) -> Path:
    content = json.loads((directory / "meta.json").read_text())
    change(content)
    content["checksum"] = meta_checksum(content)
    (tmp_path / "meta.json").write_text(json.dumps(content))
    return tmp_path


def test_meta_written_before_the_work_imbalance_reads(shards, tmp_path: Path):
    def older(content: dict) -> None:
        del content["statistics"]["summary"]["work_imbalance"]
        for row in content["statistics"]["per_event"]:
            del row["work_imbalance"]

    read = ShardMeta.read(_rewritten(shards[0], tmp_path, older))
    assert math.isnan(read.summary.work_imbalance)
    assert math.isnan(read.per_event[0].work_imbalance)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: c.pop("event_ids"), "lacks field 'event_ids'"),
        (lambda c: c.update(n_parts=0), "field 'n_parts' must be an integer >= 1"),
        (lambda c: c["source"].pop("sha256"), "field 'source' must be an object"),
        (lambda c: c["statistics"]["per_event"][0].pop("owned_nodes"), "lacks 'owned_nodes'"),
        (lambda c: c["statistics"].update(summary=[]), "summary must be an object"),
    ],
)
def test_a_malformed_field_is_refused_in_one_line(shards, tmp_path: Path, change, message):
    directory = _rewritten(shards[0], tmp_path, change)
    with pytest.raises(InputError, match=message) as error:
        ShardMeta.read(directory)
    assert str(error.value).startswith(str(directory / "meta.json"))
    assert "\n" not in str(error.value)
