"""Validates a GPU machine for partgnn in one command, and writes its figures.

On a machine with N >= 1 CUDA GPUs, with P = 1 .. --max-ranks (ranks beyond the GPUs share
them: backend gloo, halo rows staged through host memory, as ``run.backend: auto`` chooses):

- ``selfcheck``: ``partgnn selfcheck`` at every P, with both transports (NCCL while P <= N);
- ``exact``: three optimizer steps in float64 on a small simulated dataset: mode full on the
  GPU and halo mode at every P >= 2 (communication hiding on and off, recomputation on), and mode
  full and halo at the largest P again with ``model.fused`` (on a GPU the compiled LayerNorm +
  activation and the embedding_bag sums), against mode full on the CPU (weights' relative
  difference <= 1e-9); and mode full with the step replayed as CUDA graphs
  (``run.cuda_graphs: on``, 12 steps: every event run, captured, replayed) against the same run
  on the CPU, with at least one step replayed;
- ``resume``: a run interrupted after its step-2 checkpoint and continued with ``--resume``
  ends with the uninterrupted run's weights (relative difference <= 1e-9; bitwise or not, said);
- ``bench``: float32 and bf16 steps on one pile-up event graph (default 200, no pT cut) at
  every P <= N: step time, peak memory per rank (reserved, allocated, and the GPU's used memory
  with the CUDA context and NCCL), beside ``partgnn plan``'s prediction.

Writes ``OUT/validation.json`` and ``OUT/validation.md`` (a table) and
each command's log under ``OUT/logs``; prints one line per check; exits 1 if any check failed.
Without a GPU it says so in one line and exits 0. ``--device cpu`` runs the same checks on
gloo (how the script is tested on machines without a GPU)::

    .venv/bin/python tools/validate_gpu.py --out gpu-validation
    .venv/bin/python tools/validate_gpu.py --out /tmp/v --device cpu --max-ranks 2 --pileup 5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch
import yaml
from _common import partgnn_launcher

CHECKS = ("selfcheck", "exact", "resume", "bench")
TOLERANCE = 1e-9
TRANSPORTS = ("all_to_all", "p2p")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for results and logs")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--max-ranks", type=int, default=4, help="largest P (default 4)")
    parser.add_argument("--checks", nargs="+", choices=CHECKS, default=list(CHECKS))
    parser.add_argument("--pileup", type=float, default=200.0, help="bench event pile-up")
    parser.add_argument("--bench-steps", type=int, default=4, help="optimizer steps per bench run")
    parser.add_argument("--hidden", type=int, default=64, help="bench model width")
    parser.add_argument("--timeout", type=float, default=540.0, help="limit per command [s]")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("validate_gpu: no CUDA GPU on this machine (torch.cuda.is_available() is False)")
        return 0
    n_devices = torch.cuda.device_count() if args.device == "cuda" else args.max_ranks
    max_ranks = max(1, args.max_ranks)
    validation = Validation(args, max_ranks=max_ranks, bench_ranks=min(n_devices, max_ranks))
    return validation.run()


class Validation:
    """The checks of one invocation, their records and their logs."""

    def __init__(self, args: argparse.Namespace, max_ranks: int, bench_ranks: int) -> None:
        self.args = args
        self.device = args.device
        self.max_ranks = max_ranks
        self.bench_ranks = bench_ranks
        self.out = args.out
        self.logs = self.out / "logs"
        self.work = self.out / "work"
        self.records: dict[str, list[dict]] = {}
        self.failed = False

    def run(self) -> int:
        for folder in (self.logs, self.work):
            folder.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        for check in self.args.checks:
            getattr(self, f"_{check}")()
        result = {
            "machine": _machine(self.device),
            "device": self.device,
            "date": time.strftime("%Y-%m-%d"),
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "max_ranks": self.max_ranks,
            "seconds": round(time.perf_counter() - started, 1),
            "passed": not self.failed,
            **self.records,
        }
        (self.out / "validation.json").write_text(json.dumps(result, indent=2))
        (self.out / "validation.md").write_text(markdown(result))
        print(f"validate_gpu: {'all checks passed' if not self.failed else 'FAILED'} "
              f"({result['seconds']:.0f} s); {self.out / 'validation.md'}")  # fmt: skip
        return 1 if self.failed else 0

    # ------------------------------------------------------------------------------ checks

    def _selfcheck(self) -> None:
        rows = self.records.setdefault("selfcheck", [])
        for n_ranks in range(1, self.max_ranks + 1):
            for transport in TRANSPORTS if n_ranks > 1 else ("auto",):
                name = f"selfcheck-P{n_ranks}-{transport}"
                done = self._partgnn(
                    n_ranks,
                    ["selfcheck", "--device", self.device, "--transport", transport],
                    name,
                )
                match = re.search(r"logits ([\d.e+-]+), gradients ([\d.e+-]+) -> OK", done.stdout)
                backend = re.search(r"\(\w+, (\w+), ", done.stdout)
                row = {"P": n_ranks, "transport": transport, "ok": bool(match and not done.rc),
                       "backend": backend.group(1) if backend else None}  # fmt: skip
                if match:
                    row.update(logits=float(match.group(1)), gradients=float(match.group(2)))
                self._record(rows, row, name, done)

    def _exact(self) -> None:
        rows = self.records.setdefault("exact", [])
        data = self._dataset()
        reference = self._train(1, data, "cpu-full", mode="full", device="cpu")
        runs = [("full", 1, {"hide_communication": False}, False)]
        runs += [
            ("halo", n, {"hide_communication": hide}, False)
            for n in range(2, self.max_ranks + 1)
            for hide in (True, False)
        ]
        # model.fused: the compiled LayerNorm + activation and embedding_bag sums on a GPU
        runs += [("full", 1, {"hide_communication": False}, True)]
        runs += (
            [("halo", self.max_ranks, {"hide_communication": True}, True)]
            if self.max_ranks > 1
            else []
        )
        for mode, n_ranks, run, fused in runs:
            hide = run["hide_communication"]
            name = f"exact-{mode}-P{n_ranks}-hide{int(hide)}" + "-fused" * fused
            done = self._train(n_ranks, data, name, mode=mode, device=self.device, run=run,
                               model={"fused": True} if fused else None)  # fmt: skip
            row = {"mode": mode, "P": n_ranks, "hide_communication": hide, "fused": fused,
                   "ok": False, "backend": _backend(done, self.device)}  # fmt: skip
            if not done.rc and not reference.rc:
                difference, _ = _compare_weights(self.work / name, self.work / "cpu-full")
                row.update(relative_difference=difference, ok=difference <= TOLERANCE)
            self._record(rows, row, name, done if done.rc else reference)

        self._exact_captured(data, rows)

    def _exact_captured(self, data: dict[str, str], rows: list[dict]) -> None:
        """Mode full with the step replayed as CUDA graphs (``run.cuda_graphs: on``), four
        epochs so that every event's shape is run, captured, then replayed, against the same run
        on the CPU; the run's tally says how many steps were replayed (none on the CPU)."""
        optim = {"epochs": 4, "max_steps": None}
        reference = self._train(1, data, "cpu-full-4-epochs", mode="full", device="cpu",
                                optim=optim)  # fmt: skip
        name = "exact-full-P1-captured"
        done = self._train(1, data, name, mode="full", device=self.device, optim=optim,
                           run={"cuda_graphs": "on"})  # fmt: skip
        replayed = re.search(r"CUDA graphs: (\d+) step\(s\) replayed", done.stderr)
        row = {"mode": "full", "P": 1, "hide_communication": False, "fused": False,
               "captured": True, "replayed": int(replayed[1]) if replayed else 0, "ok": False,
               "backend": _backend(done, self.device)}  # fmt: skip
        if not done.rc and not reference.rc:
            difference, _ = _compare_weights(self.work / name, self.work / "cpu-full-4-epochs")
            wanted = row["replayed"] > 0 or self.device == "cpu"
            row.update(relative_difference=difference, ok=difference <= TOLERANCE and wanted)
        self._record(rows, row, name, done if done.rc else reference)

    def _resume(self) -> None:
        rows = self.records.setdefault("resume", [])
        data = self._dataset()
        n_ranks = self.max_ranks
        mode = "halo" if n_ranks > 1 else "full"
        run, optim = {"checkpoint_every": 2}, {"epochs": 2, "max_steps": None}
        whole = self._train(
            n_ranks, data, "resume-whole", mode=mode, device=self.device, run=run, optim=optim
        )
        interrupted = self.work / "resume-continued" / "checkpoints"
        row = {"mode": mode, "P": n_ranks, "ok": False}
        if whole.rc:
            self._record(rows, row, "resume-whole", whole)
            return
        shutil.rmtree(interrupted.parent, ignore_errors=True)
        interrupted.mkdir(parents=True)
        shutil.copy(self.work / "resume-whole" / "checkpoints" / "step-0000002.pt",
                    interrupted / "last.pt")  # fmt: skip
        done = self._train(
            n_ranks, data, "resume-continued", mode=mode, device=self.device, run=run,
            optim=optim, extra=["--resume"],
        )  # fmt: skip
        if not done.rc:
            difference, bitwise = _compare_weights(interrupted.parent, self.work / "resume-whole")
            row.update(relative_difference=difference, bitwise=bitwise, ok=difference <= TOLERANCE)
        self._record(rows, row, "resume-continued", done)

    def _bench(self) -> None:
        from _event_graph import write_event_graph

        from partgnn.partition.event_split import PartitionOptions
        from partgnn.partition.shard_writer import write_shards

        rows = self.records.setdefault("bench", [])
        graphs = self.work / "bench-graphs.h5"
        if not graphs.exists():
            nodes, edges = write_event_graph(graphs, pileup=self.args.pileup, pt_min=0.0)
            self.records["bench_graph"] = [{"pileup": self.args.pileup, "nodes": nodes,
                                            "edges": edges}]  # fmt: skip
        for n_ranks in range(1, self.bench_ranks + 1):
            shards = self.work / f"bench-metis{n_ranks}"
            if not shards.exists():
                write_shards(graphs, shards, PartitionOptions(n_parts=n_ranks), progress=False)
            for precision in ("float32", "bf16"):
                name = f"bench-P{n_ranks}-{precision}"
                data = {"graphs": str(graphs), "shards": str(shards), "val_events": 0}
                config = self._config(
                    name, data, mode="full" if n_ranks == 1 else "halo", device=self.device,
                    dtype="float32", model={"hidden": self.args.hidden, "steps": 8,
                                            "recompute": True},
                    run={"bf16": precision == "bf16", "checkpoint_every": 10_000},
                    optim={"epochs": self.args.bench_steps, "max_steps": None},
                )  # fmt: skip
                plan = self._command(
                    [*partgnn_launcher(1), "plan", "--config", str(config), "--json"],
                    f"{name}-plan",
                )
                done = self._command(
                    [*partgnn_launcher(n_ranks), "train", "--config", str(config)], name
                )
                row = {"P": n_ranks, "precision": precision, "ok": not done.rc}
                if not plan.rc:
                    ranks = json.loads(plan.stdout)["ranks"]
                    row["planned_mb_per_rank"] = [round(r["total_bytes"] / 2**20) for r in ranks]
                if not done.rc:
                    from partgnn.metrics.run_summary import RunSummary

                    summary = RunSummary.read(self.work / name)
                    final = summary.require_final()
                    row.update(
                        step_time_s=final.step_time_s,
                        peak_mb_per_rank=final.peak_memory_mb_per_rank,
                        allocated_mb_per_rank=final.peak_allocated_mb_per_rank,
                        device_used_mb_per_rank=final.device_used_mb_per_rank,
                        gradient_wait_fraction=summary.workload.gradient_wait_fraction,
                        mb_exchanged_per_step=summary.bytes_sent / max(summary.steps, 1) / 1e6,
                    )  # fmt: skip
                self._record(rows, row, name, done)

    # ------------------------------------------------------------------------------ helpers

    def _dataset(self) -> dict[str, str]:
        """4 pile-up-3 events without pT cut, and phi shards for P = 1 .. max_ranks."""
        from partgnn.data.detector.geometry import default_geometry
        from partgnn.data.files.writers import write_graphs
        from partgnn.data.graphs.graph_builder import GraphBuildConfig, build_event_graph
        from partgnn.data.simulation.simulate import SimulationConfig, simulate_event
        from partgnn.partition.event_split import PartitionOptions
        from partgnn.partition.shard_writer import write_shards

        graphs = self.work / "graphs.h5"
        if not graphs.exists():
            geometry = default_geometry()
            events = (
                simulate_event(geometry, SimulationConfig(pileup=3), event_id=i, seed=7)
                for i in range(4)
            )
            built = (build_event_graph(e, geometry, GraphBuildConfig(pt_min=0.0)) for e in events)
            write_graphs(graphs, ((g, q.to_dict()) for g, q in built))
        data = {"graphs": str(graphs)}
        for n_parts in range(1, self.max_ranks + 1):
            shards = self.work / f"phi{n_parts}"
            if not shards.exists():
                options = PartitionOptions(n_parts=n_parts, method="phi")
                write_shards(graphs, shards, options, progress=False)
            data[f"phi{n_parts}"] = str(shards)
        return data

    def _train(
        self, n_ranks: int, data: dict[str, str], name: str, *, mode: str, device: str,
        run: dict | None = None, optim: dict | None = None, extra: list[str] | None = None,
        model: dict | None = None,
    ) -> Done:  # fmt: skip
        if not extra:  # a fresh run (a resumed one continues in its folder)
            shutil.rmtree(self.work / name, ignore_errors=True)
        config = self._config(
            name,
            {"graphs": data["graphs"], "shards": data[f"phi{n_ranks}"], "val_events": 1},
            mode=mode, device=device, dtype="float64", model=model, run=run or {},
            optim=optim or {},
        )  # fmt: skip
        command = [*partgnn_launcher(n_ranks), "train", "--config", str(config), *(extra or [])]
        return self._command(command, name)

    def _config(
        self, name: str, data: dict, *, mode: str, device: str, dtype: str,
        model: dict | None = None, run: dict | None = None, optim: dict | None = None,
    ) -> Path:  # fmt: skip
        config = {
            "mode": mode,
            "data": data,
            "model": {"hidden": 16, "steps": 3, "recompute": True, **(model or {})},
            "optim": {"epochs": 3, "max_steps": 3, "lr": 0.003, "warmup_steps": 1,
                      **(optim or {})},
            "run": {"dir": str(self.work / name), "device": device, "dtype": dtype,
                    "progress": False, "tensorboard": False, "timeout_s": 300, **(run or {})},
        }  # fmt: skip
        if config["optim"]["max_steps"] is None:
            del config["optim"]["max_steps"]
        path = self.work / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    def _partgnn(self, n_ranks: int, arguments: list[str], name: str) -> Done:
        return self._command([*partgnn_launcher(n_ranks), *arguments], name)

    def _command(self, command: list[str], name: str) -> Done:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if self.device == "cpu":
            env["OMP_NUM_THREADS"] = "1"
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True,
                                  timeout=self.args.timeout, check=False)  # fmt: skip
            result = Done(done.returncode, done.stdout, done.stderr)
        except subprocess.TimeoutExpired as err:
            result = Done(124, _text(err.stdout), _text(err.stderr) + "\n(timed out)")
        (self.logs / f"{name}.log").write_text(
            f"$ {' '.join(command)}\nexit {result.rc}\n{result.stdout}\n{result.stderr}"
        )
        return result

    def _record(self, rows: list[dict], row: dict, name: str, done: Done) -> None:
        rows.append(row)
        if not row["ok"]:
            self.failed = True
            last = done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or [""]
            row["error"] = last[-1][:300]
        shown = {k: v for k, v in row.items() if k not in ("ok",)}
        print(f"{name}: {'ok' if row['ok'] else 'FAILED'} {json.dumps(shown)}", flush=True)


class Done:
    """A finished command: exit status and output."""

    def __init__(self, rc: int, stdout: str, stderr: str) -> None:
        self.rc, self.stdout, self.stderr = rc, stdout, stderr


def _text(value: bytes | str | None) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value or ""


def _backend(done: Done, device: str) -> str:
    """The backend a run used, as its output tells (ranks sharing a GPU say so)."""
    if "staged through host memory" in done.stderr:
        return "gloo, staged"
    return "nccl" if device == "cuda" else "gloo"


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    from partgnn.train.run_directory.saved_model import SavedModel

    return SavedModel.read(run_dir / "checkpoints" / "last.pt").weights


def _compare_weights(run_dir: Path, reference_dir: Path) -> tuple[float, bool]:
    """The largest relative difference of a run's weights from the reference run's, and
    whether they are bitwise equal."""
    weights, reference = _weights(run_dir), _weights(reference_dir)
    difference = max(
        float((weights[k].double() - r.double()).norm() / r.double().norm().clamp(min=1e-300))
        for k, r in reference.items()
    )
    return difference, all(torch.equal(weights[k], r) for k, r in reference.items())


def _machine(device: str) -> str:
    cores = f"{os.cpu_count()} cores"
    if device == "cuda":
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        return f"{len(names)} x {names[0]} (CUDA {torch.version.cuda}), {cores}"
    return f"CPU only ({platform.machine()}, {cores}; gloo)"


def markdown(result: dict) -> str:
    """The validation as markdown."""
    lines = [
        f"Machine: {result['machine']}; {result['date']}; `{result['command']}`; "
        f"{'all checks passed' if result['passed'] else 'SOME CHECKS FAILED'} "
        f"({result['seconds']:.0f} s).",
        "",
    ]
    if result.get("selfcheck"):
        lines += _table(
            ["selfcheck P", "transport", "backend", "logits rel. error", "gradients rel. error",
             "ok"],
            [[r["P"], r["transport"], r.get("backend") or "-", r.get("logits", "-"),
              r.get("gradients", "-"), _ok(r)]
             for r in result["selfcheck"]],
        )  # fmt: skip
    if result.get("exact"):
        lines += _table(
            ["float64: mode", "P", "backend", "hiding", "model.fused", "CUDA graphs",
             "weights vs CPU full (rel.)", "ok"],
            [[r["mode"], r["P"], r.get("backend", "-"), r["hide_communication"],
              r.get("fused", False),
              f"{r['replayed']} steps replayed (12 steps)" if r.get("captured") else "off",
              _fmt(r.get("relative_difference"), ".1e"), _ok(r)]
             for r in result["exact"]],
        )  # fmt: skip
    for r in result.get("resume", []):
        lines += [f"Resume ({r['mode']}, P = {r['P']}): weights vs uninterrupted "
                  f"{_fmt(r.get('relative_difference'), '.1e')} relative, bitwise "
                  f"{r.get('bitwise', '-')}: {_ok(r)}", ""]  # fmt: skip
    if result.get("bench"):
        graph = (result.get("bench_graph") or [{}])[0]
        peak = "peak reserved" if result.get("device") == "cuda" else "peak RSS"
        lines += [
            f"Bench: pile-up {graph.get('pileup', '?')} event graph, {graph.get('nodes', '?')} "
            f"nodes, {graph.get('edges', '?')} edges; IN 8 steps, checkpointing on.",
            "",
        ]
        lines += _table(
            ["P", "precision", "step time (s)", f"{peak} per rank (MiB)", "allocated (MiB)",
             "GPU used (MiB)", "planned (MiB)", "gradient wait", "MB exchanged / step", "ok"],
            [[r["P"], r["precision"], _fmt(r.get("step_time_s"), ".3f"),
              _list(r.get("peak_mb_per_rank")), _list(r.get("allocated_mb_per_rank")),
              _list(r.get("device_used_mb_per_rank")), _list(r.get("planned_mb_per_rank")),
              _fmt(r.get("gradient_wait_fraction"), ".2f"),
              _fmt(r.get("mb_exchanged_per_step"), ".1f"), _ok(r)]
             for r in result["bench"]],
        )  # fmt: skip
    return "\n".join(lines)


def _table(header: list[str], rows: list[list]) -> list[str]:
    """A markdown table's lines, then an empty line."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return [*lines, ""]


def _ok(row: dict) -> str:
    return "ok" if row["ok"] else f"FAILED: {row.get('error', '')}"


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _list(values: list[float] | None) -> str:
    return "-" if not values else " / ".join(f"{v:.0f}" for v in values)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    raise SystemExit(main())
