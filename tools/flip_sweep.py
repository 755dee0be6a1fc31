"""Flips one byte of a partgnn file at a time and reads it back with partgnn's own reader.

Every flip ends one of five ways: **detected** (the reader raises partgnn's one-line
``InputError``), **no effect** (the flipped byte is unused: everything reads back equal),
**silent** (the reader returns different values: the failure this tool exists to find),
**other error** (an exception other than InputError: a traceback for the user) or
**hang/crash** (the read took more than ``--timeout`` seconds or killed the process); the
offsets of the last three kinds are listed. Each read runs in a forked child, so a hang or
crash inside HDF5 is counted, not suffered.

Usage::

    python tools/flip_sweep.py graphs.h5 --stride 7 [--json out.json]
    python tools/flip_sweep.py shards/part-00001.h5 --stride 7

Kinds: events, graphs and scores files (read through ``partgnn.data.files.storage.open_store``) and
shard part files (through ``ShardDirectory``; the part file's directory must hold meta.json).
Checkpoints are zip files whose records carry CRC-32s: see tests/reliability/test_integrity.py.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from _common import ToolParser

from partgnn.data.files.storage import open_store
from partgnn.errors import InputError
from partgnn.partition.shard_reader import ShardDirectory


def _plain(value: object) -> object:
    """Values to compare: tensors and arrays as bytes, containers element by element."""
    if isinstance(value, torch.Tensor):
        return (str(value.dtype), tuple(value.shape), value.numpy().tobytes())
    if isinstance(value, np.ndarray):
        return (str(value.dtype), value.shape, value.tobytes())
    if isinstance(value, dict):
        return sorted((k, _plain(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return repr(value)


def read_all(path: Path) -> object:
    """Everything partgnn's reader returns for the file: root attributes, every event."""
    if path.name.startswith("part-"):
        directory = ShardDirectory(path.parent)
        with directory.open_rank(int(path.stem.removeprefix("part-"))) as shard:
            return [
                [_plain(event.graph.to_dict()), _plain(vars(event.plan)), event.n_global_edges]
                for event in shard
            ]
    with open_store(path) as store:
        out: list[object] = [_plain(store.attrs)]
        for index in range(len(store)):
            item = store[index]
            if hasattr(item, "to_dict"):
                item = item.to_dict()
            elif hasattr(item, "hits"):
                item = [item.hits, item.truth, item.particles, item.attrs]
                item = [i.to_dict("list") if hasattr(i, "to_dict") else i for i in item]
            out.append(_plain(item))
            if hasattr(store, "quality"):
                out.append(_plain(store.quality(index)))
        return out


def sweep(path: Path, stride: int, timeout: float) -> dict[str, object]:
    """Flips bit 4 of every ``stride``-th byte of a copy of ``path`` in turn; counts outcomes."""
    reference = read_all(path)
    data = path.read_bytes()
    outcomes: Counter[str] = Counter()
    unexpected: dict[str, list[int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        # Shards: the copy must sit beside a meta.json (the directory is copied once).
        if path.name.startswith("part-"):
            shutil.copytree(path.parent, Path(tmp) / "d")
            target = Path(tmp) / "d" / path.name
        else:
            target = Path(tmp) / path.name
        started = time.perf_counter()
        for offset in range(0, len(data), stride):
            damaged = bytearray(data)
            damaged[offset] ^= 0x10
            target.write_bytes(damaged)
            outcome = _read_in_child(target, reference, timeout)
            outcomes[outcome] += 1
            if outcome not in ("detected", "no effect"):
                unexpected.setdefault(outcome, []).append(offset)
        seconds = time.perf_counter() - started
    return {
        "file": str(path),
        "bytes": len(data),
        "flips": sum(outcomes.values()),
        "outcomes": dict(outcomes),
        "offsets": {outcome: found[:50] for outcome, found in unexpected.items()},
        "seconds": round(seconds, 1),
    }


def _read_in_child(path: Path, reference: object, timeout: float) -> str:
    pid = os.fork()
    if pid == 0:  # the child: read, compare, report by exit status
        os.close(2)
        try:
            same = read_all(path) == reference
        except InputError:
            os._exit(10)
        except BaseException:
            os._exit(11)
        os._exit(12 if same else 13)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            return {10: "detected", 11: "other error", 12: "no effect", 13: "silent"}.get(
                code, "crash"
            )
        time.sleep(0.001)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return "hang"


def main() -> None:
    parser = ToolParser(__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--stride", type=int, default=7, help="flip every N-th byte")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per read")
    parser.add_argument("--json", type=Path, help="write the result here too")
    parser.tiny(stride=997)
    args = parser.parse_args()
    torch.set_num_threads(1)
    result = sweep(args.file, args.stride, args.timeout)
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
