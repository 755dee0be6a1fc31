"""Every bad input a new user can give: one line naming the file, a non-zero exit, no traceback,
no output left behind.

Each case builds its bad input from the session's real pipeline (:mod:`.conftest`), runs the
``partgnn`` command on it and checks what a user sees. One case of each kind runs in a fresh
process, as a user starts it (:data:`FRESH_PROCESS_CASES`); the others run the same entry point,
:func:`partgnn.cli.main.main`, in this process (its stdout and stderr captured at the file
descriptors), which saves a process start (~3 s) each.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from partgnn.cli.main import main
from partgnn.partition.shard_meta import meta_checksum
from tests.reliability.conftest import run_partgnn, run_partgnn_in_process

#: tqdm draws its bars on stderr; they are not error lines.
_BAR = re.compile(r"\d+%\|")


def corrupt_chunk(source: Path, dataset: str, out: Path) -> Path:
    """A copy of ``source`` whose ``dataset``'s first compressed chunk is overwritten."""
    shutil.copy(source, out)
    with h5py.File(out) as h5:
        offset = h5[dataset].id.get_chunk_info(0).byte_offset
    with open(out, "r+b") as handle:
        handle.seek(offset + 50)
        handle.write(b"\x5a" * 100)
    return out


def widen_x(source: Path, out: Path, event: str = "event000000001") -> Path:
    """A copy of a graphs file whose one event has a fifth node-feature column."""
    shutil.copy(source, out)
    with h5py.File(out, "r+") as h5:
        group = h5[f"events/{event}"]
        x = group["x"][()]
        del group["x"]
        group["x"] = np.concatenate([x, x[:, :1]], axis=1)
    return out


def meta_with(shards: Path, out: Path, **fields) -> Path:
    """A copy of a shard directory whose meta.json has ``fields`` replaced (and its checksum
    made to match, so that the reader's checks of the fields themselves are reached)."""
    shutil.copytree(shards, out)
    meta = json.loads((out / "meta.json").read_text())
    meta.update(fields)
    meta["checksum"] = meta_checksum(meta)
    (out / "meta.json").write_text(json.dumps(meta))
    return out


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("echo this should never run",))


@dataclass(frozen=True)
class Case:
    """A bad input: ``make(pipeline, tmp)`` returns the command's arguments (strings/paths)."""

    name: str
    make: Callable[[dict[str, Path], Path], list]
    code: int
    message: str  # a regex the error line must match after "partgnn: error: "


def _infer(p, tmp, checkpoint=None, graphs=None, shards=None, out=None):
    args = ["infer", "--checkpoint", checkpoint or p["checkpoint"], "--out", out or tmp / "o.h5"]
    return args + (["--shards", shards] if shards else ["--graphs", graphs or p["graphs"]])


CASES = [
    # files damaged or from elsewhere
    Case(
        "graphs file corrupted mid-file: partition",
        lambda p, t: [
            "partition",
            corrupt_chunk(p["graphs"], "events/event000000002/x", t / "bad.h5"),
            "--parts",
            "2",
            "--out",
            t / "o",
        ],
        2,
        r"bad\.h5: dataset /events/event000000002/x fails its checksum",
    ),
    Case(
        "graphs file corrupted mid-file: train",
        lambda p, t: [
            "train",
            "--config",
            p["config"],
            "--set",
            f"run.dir={t / 'o'}",
            "--set",
            f"data.graphs={corrupt_chunk(p['graphs'], 'events/event000000002/x', t / 'bad.h5')}",
        ],
        2,
        r"bad\.h5: dataset /events/event000000002/x fails its checksum",
    ),
    Case(
        "events file corrupted mid-file: build-graphs",
        lambda p, t: [
            "build-graphs",
            corrupt_chunk(p["events"], "events/event000000001/hits/x", t / "bad.h5"),
            "--out",
            t / "o.h5",
        ],
        2,
        r"bad\.h5: dataset /events/event000000001/hits/x fails its checksum",
    ),
    Case(
        "one event whose x has another width: partition",
        lambda p, t: [
            "partition",
            widen_x(p["graphs"], t / "wide.h5"),
            "--parts",
            "2",
            "--out",
            t / "o",
        ],
        2,
        r"wide\.h5: event000000001: x has 5 columns but the file's node_features name 4",
    ),
    Case(
        "one event whose x has another width: infer",
        lambda p, t: _infer(p, t, graphs=widen_x(p["graphs"], t / "wide.h5")),
        2,
        r"wide\.h5: event000000001: x has 5 columns",
    ),
    Case(
        "meta.json n_parts is a string",
        lambda p, t: _infer(p, t, shards=meta_with(p["shards"], t / "s", n_parts="2")),
        2,
        r"s/meta\.json: field 'n_parts' must be an integer >= 1 \(got '2'\)",
    ),
    Case(
        "meta.json event_ids not integers",
        lambda p, t: _infer(p, t, shards=meta_with(p["shards"], t / "s", event_ids=[0.5, 1])),
        2,
        r"s/meta\.json: field 'event_ids' must be a list of distinct integer event ids",
    ),
    Case(
        "meta.json source is a list",
        lambda p, t: _infer(p, t, shards=meta_with(p["shards"], t / "s", source=[1])),
        2,
        r"s/meta\.json: field 'source' must be an object",
    ),
    # checkpoints that are not partgnn's
    Case(
        "checkpoint of random bytes",
        lambda p, t: (
            (t / "c.pt").write_bytes(random.Random(0).randbytes(5000)) and _infer(p, t, t / "c.pt")
        ),
        2,
        r"c\.pt: (refused, not a plain checkpoint|not a readable checkpoint) \(",
    ),
    Case(
        "checkpoint holding a pickle that would run code",
        lambda p, t: torch.save({"model": _RunsCode()}, t / "c.pt") or _infer(p, t, t / "c.pt"),
        2,
        r"c\.pt: refused, not a plain checkpoint \(.*GLOBAL posix\.system",
    ),
    Case(
        "torch file without partgnn's keys",
        lambda p, t: torch.save({"a": 1}, t / "c.pt") or _infer(p, t, t / "c.pt"),
        2,
        r"c\.pt: not a partgnn training checkpoint \(lacks 'model', 'config'\)",
    ),
    Case(
        "resume from a torch file without the training state",
        lambda p, t: _resume_from(p, t, {"model": {}, "config": {}}),
        2,
        r"last\.pt: not a partgnn training checkpoint \(lacks 'optimizer'",
    ),
    # outputs that cannot be written
    Case(
        "--out is a folder: infer",
        lambda p, t: (t / "dir").mkdir() or _infer(p, t, out=t / "dir"),
        2,
        r"dir: is a folder; give the path of the file to write",
    ),
    Case(
        "--out is a folder: evaluate",
        lambda p, t: (
            (t / "dir").mkdir()
            or ["evaluate", p["scores"], "--graphs", p["graphs"], "--out", t / "dir"]
        ),
        2,
        r"dir: is a folder",
    ),
    Case(
        "--out is a folder: simulate",
        lambda p, t: (t / "dir").mkdir() or ["simulate", "--events", "1", "--out", t / "dir"],
        2,
        r"dir: is a folder",
    ),
    Case(
        "--out under a file: build-graphs",
        lambda p, t: ["build-graphs", p["events"], "--out", p["events"] / "graphs.h5"],
        2,
        r"events\.h5/graphs\.h5: cannot write here \(",
    ),
    Case(
        "--out under a file: partition",
        lambda p, t: ["partition", p["graphs"], "--parts", "2", "--out", p["events"] / "s"],
        2,
        r"events\.h5/s: cannot write here \(",
    ),
    Case(
        "run.dir is a file",
        lambda p, t: ["train", "--config", p["config"], "--set", f"run.dir={p['events']}"],
        2,
        r"events\.h5: run\.dir is a file, not a folder",
    ),
    # evaluate with files of other runs
    Case(
        "evaluate --events from another simulation",
        lambda p, t: [
            "evaluate",
            p["scores"],
            "--graphs",
            p["graphs"],
            "--events",
            p["other_events"],
        ],
        2,
        r"other-events\.h5: not the events file .*graphs\.h5 was built from",
    ),
    Case(
        "evaluate --shards partitioned from other graphs",
        lambda p, t: [
            "evaluate",
            p["scores"],
            "--graphs",
            p["graphs"],
            "--shards",
            _other_shards(p, t),
        ],
        2,
        r"shards were made from another file than .*graphs\.h5",
    ),
]


def _random_bytes(path: Path) -> Path:
    path.write_bytes(random.Random(0).randbytes(5000))
    return path


def _resume_from(p: dict[str, Path], tmp: Path, state: dict) -> list:
    run = tmp / "run"
    (run / "checkpoints").mkdir(parents=True)
    torch.save(state, run / "checkpoints" / "last.pt")
    return ["train", "--config", p["config"], "--set", f"run.dir={run}", "--resume"]


def _other_graphs(p: dict[str, Path], tmp: Path) -> Path:
    assert main(["build-graphs", str(p["other_events"]), "--out", str(tmp / "g.h5")]) == 0
    return tmp / "g.h5"


def _other_shards(p: dict[str, Path], tmp: Path) -> Path:
    graphs = _other_graphs(p, tmp)
    assert main(["partition", str(graphs), "--parts", "2", "--out", str(tmp / "s")]) == 0
    return tmp / "s"


def _outputs(args: list[str]) -> list[Path]:
    """The paths the command would write: after --out, and the run directory of train."""
    found = [Path(args[i + 1]) for i, a in enumerate(args[:-1]) if a == "--out"]
    found += [Path(a.split("=", 1)[1]) for a in args if a.startswith("run.dir=")]
    return found


#: One case of each kind (corrupted file, wrong shape, bad meta.json, unsafe checkpoint, bad
#: output path, mismatched inputs) runs in the fast tier (``make test-fast``), in a fresh process
#: (~3 s of imports); every case runs in the full suite, the others in this process.
FAST_CASES = FRESH_PROCESS_CASES = {
    "graphs file corrupted mid-file: train",
    "one event whose x has another width: partition",
    "meta.json n_parts is a string",
    "checkpoint holding a pickle that would run code",
    "--out is a folder: infer",
    "--out under a file: partition",
    "run.dir is a file",
    "evaluate --events from another simulation",
}


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(case, id=case.name, marks=() if case.name in FAST_CASES else pytest.mark.slow)
        for case in CASES
    ],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(case: Case, pipeline, tmp_path, capfd):
    args = [str(a) for a in case.make(pipeline, tmp_path)]
    before = {p: p.exists() for p in _outputs(args)}
    if case.name in FRESH_PROCESS_CASES:
        done = run_partgnn(*args)
    else:
        done = run_partgnn_in_process(*args, capfd=capfd)
    returncode, stdout, stderr = done.returncode, done.stdout, done.stderr
    lines = [line for line in stderr.strip().splitlines() if not _BAR.search(line)]
    assert returncode == case.code, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("partgnn: error: "), lines[0]
    assert re.search(case.message, lines[0]), lines[0]
    assert "this should never run" not in stdout
    for path, existed in before.items():
        if not existed and path.suffix:  # a file output: nothing under its name, no temp file
            assert not path.exists(), f"{path} was written"
            if path.parent.is_dir():
                assert not list(path.parent.glob(f".{path.name}.*")), "temporary file left"


def test_debug_keeps_the_traceback(pipeline, tmp_path):
    args = ["partition", str(widen_x(pipeline["graphs"], tmp_path / "w.h5")), "--parts", "2",
            "--out", str(tmp_path / "o")]  # fmt: skip
    for debug in (["--debug", *args], args):
        env = {} if debug[0] == "--debug" else {"PARTGNN_DEBUG": "1"}
        done = run_partgnn(*debug, env=env)
        assert done.returncode != 0
        assert "Traceback (most recent call last)" in done.stderr
        assert "x has 5 columns" in done.stderr


def test_the_fast_tier_names_cases_of_the_table():
    assert {case.name for case in CASES} >= FAST_CASES


def test_a_damaged_validation_event_fails_before_the_first_step(pipeline, tmp_path, capfd):
    """The validation event (the graphs file's last) is read when training starts, not when the
    first epoch ends: no step is trained, no checkpoint written."""
    bad = corrupt_chunk(pipeline["graphs"], "events/event000000003/x", tmp_path / "bad.h5")
    run = tmp_path / "run"
    done = run_partgnn_in_process("train", "--config", str(pipeline["config"]), "--set",
                                  f"run.dir={run}", "--set", f"data.graphs={bad}",
                                  "--set", "optim.max_steps=20", "--set",
                                  "run.checkpoint_every=1", capfd=capfd)  # fmt: skip
    assert done.returncode == 2
    assert re.search(r"bad\.h5: dataset /events/event000000003/x fails its checksum",
                     done.stderr.strip().splitlines()[-1])  # fmt: skip
    assert not (run / "checkpoints").exists() or not any((run / "checkpoints").iterdir())
