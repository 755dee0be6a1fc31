"""Corrupted files are refused, never trained on: one bit flipped in any dataset of any file kind
partgnn writes (events, graphs, shards, scores), or in any record of a checkpoint, is one line
naming the file, the event and the dataset (or record), and the command exits 2.

A corrupted shard read by one rank of a training is covered by
tests/reliability/test_peer_failure.py (every rank exits 2 with the failing rank's line).

Damage that keeps the checksums right (a file rewritten by another tool) is caught by the range
checks: labels other than 0 or 1, plan indices outside their arrays.
"""

from __future__ import annotations

import re
import shutil
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest

from partgnn.data.files.storage import EventFile, GraphFile, ScoresFile
from partgnn.errors import InputError
from partgnn.partition.event_split import PartitionOptions
from partgnn.partition.shard_reader import ShardDirectory, shard_path
from partgnn.partition.shard_writer import write_shards
from partgnn.train.run_directory.checkpoints import load_checkpoint, newest_intact_checkpoint
from tests.reliability.conftest import run_partgnn, run_partgnn_in_process


def stored_datasets(path: Path) -> list[str]:
    """HDF5 paths of the datasets of a file's first event that hold stored bytes (not empty)."""
    found = []
    with h5py.File(path) as h5:
        event = sorted(h5["events"])[0]

        def add(name: str, obj: object) -> None:
            if isinstance(obj, h5py.Dataset) and obj.id.get_num_chunks() > 0:
                found.append(f"/events/{event}/{name}")

        h5["events"][event].visititems(add)
    return found


def flip_bit(source: Path, dataset: str, out: Path) -> Path:
    """A copy of ``source`` with one bit flipped in the middle of ``dataset``'s stored bytes."""
    shutil.copy(source, out)
    with h5py.File(out) as h5:
        chunk = h5[dataset].id.get_chunk_info(0)
    with open(out, "r+b") as handle:
        handle.seek(chunk.byte_offset + chunk.size // 2)
        byte = handle.read(1)[0]
        handle.seek(chunk.byte_offset + chunk.size // 2)
        handle.write(bytes([byte ^ 0x04]))
    return out


def rewrite_dataset(source: Path, dataset: str, out: Path, change) -> Path:
    """A copy of ``source`` whose ``dataset`` is replaced by ``change(values)``, checksummed
    anew (a consistent file with wrong values, as another tool could write)."""
    shutil.copy(source, out)
    with h5py.File(out, "r+") as h5:
        values = change(h5[dataset][()])
        del h5[dataset]
        h5.create_dataset(dataset, data=values, fletcher32=True)
    return out


def read_event_graph(path: Path) -> None:
    """The graph and the fields kept beside it (a simulated event's cluster features: read when
    a model reads them)."""
    with GraphFile(path) as graphs:
        graphs[0]
        graphs.extra(0)


def read_event(path: Path) -> None:
    with EventFile(path) as events:
        events[0]


def read_scores(path: Path) -> None:
    with ScoresFile(path) as scores:
        scores[0]


READERS = {"events": read_event, "graphs": read_event_graph, "scores": read_scores}


@pytest.mark.parametrize("kind", sorted(READERS))
def test_every_flipped_dataset_of_an_event_file_is_named(pipeline, tmp_path, kind):
    source = pipeline[kind]
    datasets = stored_datasets(source)
    assert len(datasets) >= {"events": 15, "graphs": 10, "scores": 1}[kind]
    for dataset in datasets:
        bad = flip_bit(source, dataset, tmp_path / "bad.h5")
        with pytest.raises(InputError) as caught:
            READERS[kind](bad)
        assert str(caught.value) == (
            f"{bad}: dataset {dataset} fails its checksum or cannot be decoded "
            "(the file is corrupted)"
        )


@pytest.mark.parametrize("kind", sorted(READERS))
def test_info_reads_every_dataset_and_names_a_flipped_one(pipeline, tmp_path, kind, capfd):
    source = pipeline[kind]
    done = run_partgnn_in_process("info", str(source), capfd=capfd)
    assert done.returncode == 0 and "datasets read: every checksum holds" in done.stdout
    dataset = stored_datasets(source)[-1]
    bad = flip_bit(source, dataset, tmp_path / "bad.h5")
    done = run_partgnn_in_process("info", str(bad), capfd=capfd)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f"partgnn: error: {bad}: dataset {dataset} fails its checksum or cannot be decoded "
        "(the file is corrupted)"
    )


@pytest.fixture(scope="module")
def shards_with_sectors(pipeline, tmp_path_factory) -> Path:
    """Shards of the pipeline's graphs that also hold extended naive sectors (margin 1)."""
    out = tmp_path_factory.mktemp("sectors") / "shards"
    write_shards(
        pipeline["graphs"], out, PartitionOptions(n_parts=2, method="phi", margin=1), progress=False
    )
    return out


def test_every_flipped_dataset_of_a_shard_is_named(shards_with_sectors, tmp_path):
    part = shard_path(shards_with_sectors, 1)
    datasets = stored_datasets(part)
    assert {"/events/event000000000/plan/send_index", "/events/event000000000/y"} <= set(datasets)
    assert any("/sector/" in name for name in datasets)
    for dataset in datasets:
        shards = tmp_path / "shards"
        shutil.rmtree(shards, ignore_errors=True)
        shutil.copytree(shards_with_sectors, shards)
        flip_bit(part, dataset, shard_path(shards, 1))
        with pytest.raises(InputError) as caught:
            ShardDirectory(shards).open_rank(1)[0]
        assert str(caught.value).startswith(f"{shard_path(shards, 1)}: dataset {dataset} fails")


def test_a_label_other_than_0_or_1_is_refused(pipeline, shards_with_sectors, tmp_path):
    def label_90(y: np.ndarray) -> np.ndarray:
        y = y.copy()
        y[3] = 90
        return y

    graphs = rewrite_dataset(
        pipeline["graphs"], "events/event000000000/y", tmp_path / "g.h5", label_90
    )
    with pytest.raises(InputError, match=r"event000000000: edge label y = 90\.0 at edge 3 "):
        read_event_graph(graphs)
    shards = tmp_path / "shards"
    shutil.copytree(shards_with_sectors, shards)
    part = shard_path(shards, 0)
    rewrite_dataset(part, "events/event000000000/y", tmp_path / "p.h5", label_90)
    shutil.move(tmp_path / "p.h5", part)
    with pytest.raises(InputError, match=r"part-00000\.h5: event000000000: edge label y = 90"):
        ShardDirectory(shards).open_rank(0)[0]


def test_a_plan_index_outside_its_array_is_refused(shards_with_sectors, tmp_path):
    shards = tmp_path / "shards"
    shutil.copytree(shards_with_sectors, shards)
    part = shard_path(shards, 1)
    rewrite_dataset(
        part, "events/event000000000/plan/send_index", tmp_path / "p.h5", lambda a: a + 10**6
    )
    shutil.move(tmp_path / "p.h5", part)
    with pytest.raises(
        InputError, match=r"part-00001\.h5: event000000000: .*send_index is not an owned node"
    ):
        ShardDirectory(shards).open_rank(1)[0]


def test_scores_outside_0_1_are_refused(pipeline, tmp_path):
    scores = rewrite_dataset(
        pipeline["scores"],
        "events/event000000000/scores",
        tmp_path / "s.h5",
        lambda s: np.where(np.arange(s.size) == 2, np.nan, s).astype(np.float32),
    )
    with pytest.raises(InputError, match=r"event000000000/scores holds values outside \[0, 1\]"):
        read_scores(scores)


def checkpoint_records(path: Path) -> list[zipfile.ZipInfo]:
    with zipfile.ZipFile(path) as archive:
        return [info for info in archive.infolist() if info.file_size > 0]


def flip_record(source: Path, record: zipfile.ZipInfo, out: Path) -> Path:
    """A copy of a zip file with one bit flipped in the middle of ``record``'s bytes."""
    shutil.copy(source, out)
    with open(out, "r+b") as handle:
        handle.seek(record.header_offset + 26)
        name_length, extra_length = np.frombuffer(handle.read(4), dtype="<u2")
        start = record.header_offset + 30 + int(name_length) + int(extra_length)
        handle.seek(start + record.compress_size // 2)
        byte = handle.read(1)[0]
        handle.seek(start + record.compress_size // 2)
        handle.write(bytes([byte ^ 0x04]))
    return out


def test_every_flipped_record_of_a_checkpoint_is_named(pipeline, tmp_path):
    records = checkpoint_records(pipeline["checkpoint"])
    assert sum("/data/" in info.filename for info in records) >= 10  # the tensors
    for record in records:
        bad = flip_record(pipeline["checkpoint"], record, tmp_path / "bad.pt")
        with pytest.raises(InputError) as caught:
            load_checkpoint(bad)
        assert str(caught.value) == (
            f"{bad}: record {record.filename} fails its CRC-32 check (the file is corrupted)"
        )


def _tensor_record(path: Path) -> zipfile.ZipInfo:
    return next(info for info in checkpoint_records(path) if info.filename.endswith("/data/0"))


CLI_CASES = {
    "scores: evaluate": (
        lambda p, t: [
            "evaluate", flip_bit(p["scores"], "/events/event000000003/scores", t / "b.h5"),
            "--graphs", p["graphs"], "--out", t / "out.json",
        ],
        r"b\.h5: dataset /events/event000000003/scores fails its checksum",
    ),
    "checkpoint: infer": (
        lambda p, t: [
            "infer", "--checkpoint",
            flip_record(p["checkpoint"], _tensor_record(p["checkpoint"]), t / "b.pt"),
            "--graphs", p["graphs"], "--out", t / "out.h5",
        ],
        r"b\.pt: record \S+/data/0 fails its CRC-32 check",
    ),
}  # fmt: skip


#: The case that runs in a fresh process, as a user starts it; the others run the command's
#: entry point in this process (the same code, without a process start each).
FRESH_PROCESS_CASE = "checkpoint: infer"


@pytest.mark.parametrize("case", sorted(CLI_CASES))
def test_a_corrupted_input_is_one_line_and_exit_2(pipeline, tmp_path, case, capfd):
    make, message = CLI_CASES[case]
    args = [str(a) for a in make(pipeline, tmp_path)]
    if case == FRESH_PROCESS_CASE:
        done = run_partgnn(*args)
    else:
        done = run_partgnn_in_process(*args, capfd=capfd)
    lines = [line for line in done.stderr.strip().splitlines() if "it/s]" not in line]
    assert done.returncode == 2, done.stderr[-3000:]
    assert len(lines) == 1, done.stderr
    assert re.search(message, lines[0]), lines[0]
    assert not list(tmp_path.glob("out.*"))  # no output, not even a partial one


def test_resume_skips_damaged_checkpoints_and_refuses_when_none_is_left(pipeline, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(pipeline["run"], run)
    checkpoints = run / "checkpoints"
    steps = sorted(checkpoints.glob("step-*.pt"))
    assert steps, "the pipeline's run keeps its step checkpoints"
    last = checkpoints / "last.pt"
    flip_record(last, _tensor_record(last), tmp_path / "bad.pt")
    shutil.move(tmp_path / "bad.pt", last)
    assert newest_intact_checkpoint(checkpoints) == (
        steps[-1],
        [f"{last}: record {_tensor_record(last).filename} fails its CRC-32 check "
         "(the file is corrupted)"],
    )  # fmt: skip
    args = ["train", "--config", str(pipeline["config"]), "--set", f"run.dir={run}",
            "--resume", "auto"]  # fmt: skip
    done = run_partgnn(*args)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"skipped damaged checkpoints ({last}: record" in done.stderr
    assert f"resuming from {steps[-1]}" in done.stderr
    for path in [last, *checkpoints.glob("step-*.pt")]:
        path.write_bytes(path.read_bytes()[:1000])  # torn
    done = run_partgnn(*args)
    lines = [line for line in done.stderr.strip().splitlines() if "it/s]" not in line]
    assert done.returncode == 2, done.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith(f"partgnn: error: {last}: "), lines
