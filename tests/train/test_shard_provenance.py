"""Part files mixed from two partition runs are refused on every rank, before any exchange.

Unit tests of the group check (pure) and of the reader; then real processes: a shard directory
whose part-00001.h5 comes from another run (METIS seed 7 instead of 0, or phi instead of METIS)
makes `partgnn train` (halo and naive) and `partgnn infer` exit 2 on both ranks with one line
naming the file, fast (no exchange is attempted, no timeout waited for).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from partgnn.errors import InputError
from partgnn.partition.event_split import PartitionOptions
from partgnn.partition.shard_reader import ShardDirectory, shard_path
from partgnn.partition.shard_writer import write_shards
from partgnn.train.items.group_shards import _problem
from tests.distributed.launch import launch
from tests.train.conftest import write_config


def _report(rank: int, **changes) -> dict:
    report = {
        "file": f"d/part-{rank:05d}.h5",
        "provenance": {"n_parts": 2, "method": "metis", "seed": 0, "run_id": "abc"},
        "event_ids": [0, 1],
        "send_counts": [[0, 3], [0, 2]] if rank == 0 else [[4, 0], [5, 0]],
        "halo_counts": [[0, 4], [0, 5]] if rank == 0 else [[3, 0], [2, 0]],
    }
    for key, value in changes.items():
        if key in report["provenance"]:
            report["provenance"][key] = value
        else:
            report[key] = value
    return report


def test_matching_reports_pass():
    assert _problem([_report(0), _report(1)]) is None


def test_another_run_is_named_with_both_files():
    problem = _problem([_report(0), _report(1, seed=7, run_id="def")])
    assert problem == (
        "d/part-00001.h5 and d/part-00000.h5 come from different partition runs (seed 7 vs 0); "
        "re-run partgnn partition into one directory"
    )


def test_counts_that_do_not_match_pairwise_are_refused():
    problem = _problem([_report(0), _report(1, halo_counts=[[3, 0], [1, 0]])])
    assert problem == (
        "event 1: d/part-00000.h5 sends 2 rows to rank 1 but d/part-00001.h5 expects 1 from "
        "rank 0 (part files from different partitions)"
    )


def test_a_rank_that_cannot_read_its_file_is_reported_to_all():
    problem = _problem([_report(0), {"file": "d", "error": "d/part-00001.h5: missing"}])
    assert problem == "rank 1 cannot use its shard: d/part-00001.h5: missing"


@pytest.fixture(scope="module")
def mixed(dataset, tmp_path_factory) -> dict[str, Path]:
    """METIS seed 0 directories whose part-00001.h5 is replaced by another run's."""
    root = tmp_path_factory.mktemp("mixed")
    runs = {
        "seed0": PartitionOptions(n_parts=2, method="metis", seed=0),
        "seed7": PartitionOptions(n_parts=2, method="metis", seed=7),
        "phi": PartitionOptions(n_parts=2, method="phi"),
    }
    for name, options in runs.items():
        write_shards(dataset["graphs"], root / name, options, progress=False)
    mixes = {}
    for other in ("seed7", "phi"):
        mix = root / f"seed0+{other}"
        shutil.copytree(root / "seed0", mix)
        shutil.copy(shard_path(root / other, 1), shard_path(mix, 1))
        mixes[other] = mix
    mixes["seed0"] = root / "seed0"
    return mixes


def test_the_reader_names_a_part_file_from_another_run(mixed):
    shards = ShardDirectory(mixed["seed7"])
    with pytest.raises(InputError, match=r"part-00001.h5: seed is 7 but meta.json says 0"):
        shards.open_rank(1)
    with pytest.raises(InputError, match=r"part-00001.h5: method is 'phi' but meta.json says"):
        ShardDirectory(mixed["phi"]).open_rank(1)


def test_a_renamed_part_file_is_refused(mixed, tmp_path):
    renamed = tmp_path / "renamed"
    shutil.copytree(mixed["seed0"], renamed)
    shutil.copy(shard_path(renamed, 0), shard_path(renamed, 1))
    with pytest.raises(InputError, match="is the part file of rank 0, not of rank 1"):
        ShardDirectory(renamed).open_rank(1)


@pytest.mark.slow
@pytest.mark.parametrize(
    "other, command",
    [("seed7", "halo"), ("seed7", "naive"), ("seed7", "infer"), ("phi", "halo")],
)
def test_mixed_shards_are_refused_on_every_rank(mixed, tmp_path, other, command):
    directory = mixed[other]
    if command == "infer":
        config = write_config(
            tmp_path / "train.yaml",
            mode="halo",
            data={"shards": str(mixed["seed0"])},
            optim={"max_steps": 1},
            run={"dir": str(tmp_path / "run")},
        )
        trained = launch(2, "partgnn", ["train", "--config", str(config)], workdir=tmp_path / "t")
        assert all(r.returncode == 0 for r in trained), trained[0].stderr[-2000:]
        args = ["infer", "--checkpoint", str(tmp_path / "run" / "checkpoints" / "last.pt"),
                "--shards", str(directory), "--out", str(tmp_path / "scores.h5")]  # fmt: skip
    else:
        config = write_config(
            tmp_path / "train.yaml",
            mode=command,
            data={"shards": str(directory)},
            run={"dir": str(tmp_path / "run"), "timeout_s": 600},
        )
        args = ["train", "--config", str(config)]
    # The launcher's deadline (120 s) sits below the collective timeout (600 s): a rank that
    # waited for a peer until the timeout would be killed and have no exit status.
    results = launch(2, "partgnn", args, workdir=tmp_path / "logs", timeout=120)
    detail = "seed is 7 but meta.json says 0" if other == "seed7" else "method is 'phi'"
    for result in results:
        assert result.returncode == 2, result.stderr[-2000:]
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("partgnn: error: rank 1 cannot use its shard: "), lines[0]
        assert f"{directory}/part-00001.h5: {detail}" in lines[0]
    assert not (tmp_path / "scores.h5").exists()
