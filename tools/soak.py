"""A soak: a long halo run under ``torchrun --max-restarts`` with faults injected at random
steps, which must end with weights bit-identical to an uninterrupted run.

The run is relaunched with the same command line (``--resume auto``) whenever torchrun gives
up, as a batch system requeues a job. Faults (chosen by ``--seed``, at random steps):

- ``kill``: SIGKILL of one rank's process (torchrun restarts the group);
- ``term``: SIGTERM of torchrun (the ranks checkpoint and stop; the soak relaunches);
- ``disk``: the run directory's disk is filled just before a checkpoint (the checkpoint write
  fails with one line; torchrun restarts the group; the soak frees the disk once it failed);
- ``corrupt``: the ranks frozen (SIGSTOP: no checkpoint is renamed over a damaged file), one
  byte of ``last.pt`` and of the newest step checkpoint flipped, then the ranks killed (the
  restart skips both damaged files and resumes from the one before).

Every fault is recorded with the step it hit, the step the run resumed from and the time lost
(from the fault to the moment training passed that step again).

Usage::

    python tools/soak.py --work /tmp/soak --steps 500 --faults 12 [--json soak.json]

Needs root (the run directory is a tmpfs of ``--disk-mb`` MiB so that ``disk`` faults can fill
it); without root the ``disk`` faults are left out and the summary says so.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from _common import ToolParser, record_table

REPOSITORY = Path(__file__).resolve().parents[1]
FAULTS = ("kill", "term", "disk", "corrupt")


@dataclass
class Fault:
    """One injected fault and what it cost."""

    kind: str
    at_step: int  # the newest checkpoint's step when it was injected
    injected_s: float  # seconds since the soak began
    lost_s: float | None = None  # until new processes wrote their first checkpoint
    resumed_at: int | None = None  # the newest checkpoint when new processes appeared
    workers: tuple[int, ...] = ()  # the rank processes it hit


def run_partgnn(*args: str, env: dict[str, str]) -> None:
    done = subprocess.run([sys.executable, "-m", "partgnn", *args], env=env,
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"soak: partgnn {args[0]} failed: {done.stderr.strip()[-500:]}")


def environment() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPOSITORY))
    env.pop("TORCHELASTIC_ERROR_FILE", None)
    return env


def prepare(work: Path, env: dict[str, str]) -> Path:
    """Events, graphs and 2-rank shards (made once: 4 events of pile-up 3, phi sectors)."""
    shards = work / "shards"
    if not (shards / "meta.json").exists():
        work.mkdir(parents=True, exist_ok=True)
        run_partgnn("simulate", "--events", "4", "--pileup", "3", "--seed", "7", "--out",
                    str(work / "events.h5"), env=env)  # fmt: skip
        run_partgnn("build-graphs", str(work / "events.h5"), "--pt-min", "0", "--out",
                    str(work / "graphs.h5"), env=env)  # fmt: skip
        run_partgnn("partition", str(work / "graphs.h5"), "--parts", "2", "--method", "phi",
                    "--out", str(shards), env=env)  # fmt: skip
    return shards


def train_command(shards: Path, run: Path, steps: int, restarts: int, port: int) -> list[str]:
    return [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
        "--master-port", str(port), "--max-restarts", str(restarts),
        "-m", "partgnn", "train", "--config", "halo", "--resume", "auto",
        "--set", f"data.shards={shards}", "--set", f"run.dir={run}",
        "--set", f"optim.max_steps={steps}", "--set", "optim.epochs=100000",
        "--set", "run.checkpoint_every=10", "--set", "run.eval_every=100000",
        "--set", "run.timeout_s=60", "--set", "data.val_events=1",
    ]  # fmt: skip


def metrics_rows(run: Path) -> list[tuple[str, ...]]:
    """metrics.csv without its timing, memory and byte-count columns (they differ from run to
    run, and the bytes exchanged count from the start or resume); the step first."""
    with open(run / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    kept = ["step"] + [
        k for k in rows[0] if k != "step" and not k.endswith(("_s", "_mb_max", "_per_rank",
                                                              "_exchanged"))
    ]  # fmt: skip
    return [tuple(row[k] for k in kept) for row in rows]


def newest_step(run: Path) -> int:
    steps = [int(p.stem.removeprefix("step-")) for p in (run / "checkpoints").glob("step-*.pt")]
    return max(steps, default=0)


def worker_pids(agent: subprocess.Popen) -> list[int]:
    try:
        children = Path(f"/proc/{agent.pid}/task/{agent.pid}/children").read_text().split()
    except OSError:
        return []
    return [int(pid) for pid in children]


def flip_byte(path: Path) -> None:
    """Flips one bit inside the data of the checkpoint's largest zip record (the middle of the
    file can be a record's alignment padding, which no check reads: the damage went unseen)."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        record = max(archive.infolist(), key=lambda info: info.compress_size)
    header = record.header_offset
    name_length, extra_length = struct.unpack("<HH", data[header + 26 : header + 30])
    start = header + 30 + name_length + extra_length
    data[start + record.compress_size // 2] ^= 0x10
    path.write_bytes(bytes(data))


class Disk:
    """The run directory on a small tmpfs that a ``disk`` fault fills and frees."""

    def __init__(self, mount: Path, megabytes: int) -> None:
        self.mount = mount
        mount.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs",
                               str(mount)], capture_output=True)  # fmt: skip
        self.mounted = done.returncode == 0
        self.filler = mount / "filler"

    def fill(self) -> None:
        """Leaves 64 KiB free: less than a checkpoint."""
        free = shutil.disk_usage(self.mount).free
        with open(self.filler, "wb") as handle:
            handle.write(b"\0" * max(0, free - 64 * 1024))

    def top_up(self) -> None:
        """Fills again what the run freed since :meth:`fill` (pruned step checkpoints, an old
        ``last.pt`` renamed over): otherwise the next checkpoint could fit after all."""
        free = shutil.disk_usage(self.mount).free
        if free > 128 * 1024:
            with open(self.filler, "ab") as handle:
                handle.write(b"\0" * (free - 64 * 1024))

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def unmount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", str(self.mount)], check=False)


def soak(args: argparse.Namespace) -> dict[str, object]:
    env = environment()
    work = args.work.resolve()
    shards = args.shards.resolve() if args.shards else prepare(work, env)
    reference = work / "reference"
    shutil.rmtree(reference, ignore_errors=True)
    started = time.perf_counter()
    done = subprocess.run(train_command(shards, reference, args.steps, 0, args.port), env=env,
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"soak: the reference run failed: {done.stderr[-2000:]}")
    reference_s = time.perf_counter() - started

    disk = Disk(work / "disk", args.disk_mb) if os.geteuid() == 0 else None
    kinds = [k for k in FAULTS if k != "disk" or (disk is not None and disk.mounted)]
    rng = random.Random(args.seed)
    # Fault steps: distinct checkpoint steps spread over the run, in order.
    targets = sorted(rng.sample(range(20, args.steps - 10, 10), args.faults))
    order = [kinds[i % len(kinds)] for i in range(len(targets))]
    rng.shuffle(order)
    plan = list(zip(targets, order, strict=True))
    run = (disk.mount if disk and disk.mounted else work) / "soak"
    shutil.rmtree(run, ignore_errors=True)
    faults: list[Fault] = []
    launches = 0
    log = work / "soak.log"
    started = time.perf_counter()
    try:
        with open(log, "w") as stderr:
            while True:
                launches += 1
                stderr.write(f"=== launch {launches}\n")
                stderr.flush()
                agent = subprocess.Popen(
                    train_command(shards, run, args.steps, args.max_restarts, args.port),
                    env=env, stdout=subprocess.DEVNULL, stderr=stderr,
                )  # fmt: skip
                if _drive(agent, run, plan, faults, disk, started, args.steps) == 0:
                    break
                if launches > 4 * args.faults + 5:
                    raise SystemExit(f"soak: gave up after {launches} launches; see {log}")
        soak_s = time.perf_counter() - started
        mine = torch.load(run / "checkpoints" / "last.pt", weights_only=True)["model"]
        rows, lock, temporaries = (
            metrics_rows(run),
            (run / ".lock").exists(),
            [p.name for p in (run / "checkpoints").glob(".*")],
        )
    finally:
        if disk is not None:
            disk.free()
            disk.unmount()
    theirs = torch.load(reference / "checkpoints" / "last.pt", weights_only=True)["model"]
    differing = [k for k in theirs if not torch.equal(mine[k], theirs[k])]
    steps = [row[0] for row in rows]
    text = log.read_text()
    return {
        "steps": args.steps,
        "faults": [{k: v for k, v in asdict(f).items() if k != "workers"} for f in faults],
        "faults_by_kind": {k: sum(f.kind == k for f in faults) for k in FAULTS},
        "planned_not_injected": [{"at_step": step, "kind": kind} for step, kind in plan],
        "disk_faults": "on" if "disk" in kinds else "off (needs root to mount a tmpfs)",
        "launches": launches,
        "group_failures_seen_by_torchrun": text.count("failed (exitcode:"),
        "damaged_checkpoints_skipped": text.count("skipped damaged checkpoints"),
        "reference_s": round(reference_s, 1),
        "soak_s": round(soak_s, 1),
        "lost_s_mean": round(sum(f.lost_s or 0 for f in faults) / max(1, len(faults)), 1),
        "extra_s_per_fault": round((soak_s - reference_s) / max(1, len(faults)), 1),
        "bit_identical": not differing and mine.keys() == theirs.keys(),
        "differing_tensors": differing,
        "metrics_as_reference": rows == metrics_rows(reference),
        "steps_logged_twice": len(steps) - len(set(steps)),
        "lock_left": lock,
        "temporaries_left": temporaries,
    }


def _drive(agent, run, plan, faults, disk, started, steps) -> int:
    """Watches one launch, injecting the planned faults before the run's last checkpoint
    (``steps``: a fault on a finished run would damage its final weights, not test a
    recovery); returns torchrun's exit status."""
    filled_under: list[int] | None = None  # the workers that a full disk is meant to fail
    while agent.poll() is None:
        step = newest_step(run)
        current = tuple(worker_pids(agent))
        for fault in faults:
            # Time lost: until processes other than those the fault hit (restarted by torchrun,
            # or a new launch) write their first checkpoint (it includes up to 10 useful steps).
            if fault.resumed_at is None and current and current != fault.workers:
                fault.resumed_at = step
            if fault.lost_s is None and fault.resumed_at is not None and step > fault.resumed_at:
                fault.lost_s = round(time.perf_counter() - started - fault.injected_s, 1)
        # At the first checkpoint seen at or past the planned step, once the last fault's
        # group has been replaced: a busy machine may starve this loop for a whole checkpoint
        # interval, and a planned fault is never dropped (a soak missing a kind of fault would
        # fail for the machine's load, not for partgnn), nor stacked on the previous one.
        recovered = all(fault.resumed_at is not None for fault in faults)
        if plan and plan[0][0] <= step < steps and filled_under is None and recovered:
            _, kind = plan.pop(0)
            workers = worker_pids(agent)
            _inject(kind, agent, run, disk, workers)
            faults.append(
                Fault(kind, step, round(time.perf_counter() - started, 1), workers=tuple(workers))
            )
            if kind == "disk":
                filled_under = workers
        if filled_under is not None and current and set(current).isdisjoint(filled_under):
            # The full disk failed the group and torchrun started another: free it. (Only then:
            # a moment with no workers, or an unreadable process list, frees nothing.)
            disk.free()
            filled_under = None
        elif filled_under is not None:
            disk.top_up()
        time.sleep(0.05)
    if disk is not None:
        disk.free()
    return agent.returncode


def _inject(
    kind: str, agent: subprocess.Popen, run: Path, disk: Disk | None, workers: list[int]
) -> None:
    if kind == "kill" and workers:
        os.kill(random.choice(workers), signal.SIGKILL)
    elif kind == "term":
        agent.send_signal(signal.SIGTERM)
    elif kind == "disk" and disk is not None:
        disk.fill()
    elif kind == "corrupt":
        # The group is frozen first: a checkpoint being written would otherwise be renamed over
        # a damaged file right after the flip, and the restart would find nothing damaged.
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        checkpoints = run / "checkpoints"
        for path in [checkpoints / "last.pt", *sorted(checkpoints.glob("step-*.pt"))[-1:]]:
            if path.exists():
                flip_byte(path)
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _record(path: Path | None, result: dict) -> None:
    """The soak's one measurement on the current-figures page."""
    kinds = ", ".join(f"{n} {kind}" for kind, n in result["faults_by_kind"].items() if n)
    kept = ("steps", "lost_s_mean", "extra_s_per_fault", "steps_logged_twice")
    measured = {**{key: result[key] for key in kept}, "faults": len(result["faults"]),
                "kinds": kinds}  # fmt: skip
    record_table(
        path, "soak",
        "Halo training on 2 ranks under torchrun with faults injected at random steps (a rank "
        "killed, torchrun stopped by SIGTERM, the disk filled before a checkpoint, the last "
        "checkpoints corrupted), resumed with --resume auto, against an uninterrupted run",
        [measured], row_label="{steps} steps, {faults} faults ({kinds})", column_label="result",
        cell="{lost_s_mean:.1f} s lost per fault; final weights and metrics.csv bit-identical; "
        "{steps_logged_twice} steps logged twice",
    )  # fmt: skip


def main() -> None:
    parser = ToolParser(__doc__.split("\n\n")[0], figures="reliability")
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--faults", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-restarts", type=int, default=3)
    parser.add_argument("--disk-mb", type=int, default=256)
    parser.add_argument("--port", type=int, default=29650)
    parser.add_argument("--shards", type=Path, help="2-rank shards to train on (default: made)")
    parser.add_argument("--json", type=Path)
    parser.tiny(steps=30, faults=1)
    args = parser.parse_args()
    result = soak(args)
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    ok = result["bit_identical"] and result["metrics_as_reference"]
    ok = ok and not result["planned_not_injected"]
    ok = ok and not result["lock_left"] and not result["temporaries_left"]
    if ok:  # a failed soak is no figure
        _record(args.record, result)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
