"""Fingerprints of trained weights: proof that a refactor left training's arithmetic unchanged.

Simulates 4 small events (pile-up 3, no pT cut, seed 7), builds their graphs, partitions them by
phi sectors for 2 ranks (with and without a 2-hop margin), and trains the same float64 model for
2 epochs in each mode: ``full`` (one process), ``halo`` and ``naive`` and overlapping sectors
(``torchrun``, 2 ranks, one thread each) and ``ddp`` (2 ranks), checkpointing and communication
hiding on. Prints one JSON object: each run's SHA-256 over its final weights (``last.pt``'s model
state,
parameters in name order, raw bytes), so two commits are compared bit for bit::

    .venv/bin/python tools/weights_fingerprint.py > before.json
    # ... change the code ...
    .venv/bin/python tools/weights_fingerprint.py --expect before.json

With ``--expect`` it exits 1 and names every run whose weights differ. The last bits of float
arithmetic follow the CPU's kernels, so the JSON records the CPU (``"cpu"``: its model name and
torch's vector capability) and a reference recorded on another CPU is named as such when it
differs: record one here, at the commit before the change.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from _common import ToolParser, cpu, partgnn_launcher, record_figures

#: Mode, the shards it reads (``None``: the graphs file), and its processes.
RUNS: dict[str, tuple[str, str | None, int]] = {
    "full": ("full", None, 1),
    "halo": ("halo", "phi2", 2),
    "naive": ("naive", "phi2", 2),
    "overlapping": ("overlapping", "phi2-margin2", 2),
    "ddp": ("ddp", None, 2),
}


def main() -> None:
    parser = ToolParser(__doc__, figures="exactness")
    parser.add_argument("--expect", type=Path, help="a previous run's JSON to compare with")
    parser.add_argument("--runs", nargs="+", default=list(RUNS), choices=list(RUNS))
    parser.tiny(runs=["halo"])
    args = parser.parse_args()
    if args.record is not None and args.expect is None:
        sys.exit("--record needs --expect: the figure is the comparison with a reference")
    expected = None if args.expect is None else _read_expected(args.expect)  # before the runs
    with tempfile.TemporaryDirectory() as folder:
        fingerprints = fingerprint_runs(Path(folder), args.runs)
    import torch

    here = f"{cpu()}, torch {torch.__version__}"
    print(json.dumps({**fingerprints, "cpu": here}, indent=1))
    if expected is not None:
        differ = [name for name in fingerprints if expected.get(name) != fingerprints[name]]
        if differ:
            recorded = expected.get("cpu", "a CPU it does not name")
            elsewhere = (
                f" ({args.expect} was recorded on {recorded}, this is {here}: record a "
                "reference here, at the commit before the change)"
                if recorded != here
                else ""
            )
            print(
                f"weights differ from {args.expect}: {', '.join(differ)}{elsewhere}",
                file=sys.stderr,
            )
            sys.exit(1)
        print(f"weights bitwise equal to {args.expect}: {', '.join(fingerprints)}")
        record_figures(args.record, [(
            "weights fingerprint: final weights of float64 runs "
            f"({', '.join(fingerprints)}) against the reference hashes",
            f"bitwise equal to {args.expect}",
        )])  # fmt: skip


def _read_expected(path: Path) -> dict[str, str]:
    """A previous run's fingerprints; one line and exit 2 when the file is missing or not one."""
    try:
        expected = json.loads(path.read_text())
    except FileNotFoundError:
        sys.stderr.write(f"weights_fingerprint: {path}: file not found\n")
        sys.exit(2)
    except (OSError, ValueError) as err:
        sys.stderr.write(f"weights_fingerprint: {path}: not a fingerprints JSON ({err})\n")
        sys.exit(2)
    if not isinstance(expected, dict):
        sys.stderr.write(f"weights_fingerprint: {path}: not a fingerprints JSON (no mapping)\n")
        sys.exit(2)
    return expected


def fingerprint_runs(folder: Path, runs: list[str]) -> dict[str, str]:
    """Trains each of ``runs`` on a fresh small dataset in ``folder``; returns their hashes."""
    from partgnn.data.detector.geometry import default_geometry
    from partgnn.data.files.writers import write_graphs
    from partgnn.data.graphs.graph_builder import GraphBuildConfig, build_event_graph
    from partgnn.data.simulation.simulate import SimulationConfig, simulate_event
    from partgnn.data.simulation.simulation_config import IDEAL_DETECTOR
    from partgnn.partition.event_split import PartitionOptions
    from partgnn.partition.shard_writer import write_shards

    geometry = default_geometry()
    graphs = folder / "graphs.h5"
    write_graphs(
        graphs,
        (
            (graph, quality.to_dict())
            for graph, quality in (
                build_event_graph(
                    simulate_event(
                        geometry, SimulationConfig(pileup=3, **IDEAL_DETECTOR), event_id=i, seed=7
                    ),
                    geometry,
                    GraphBuildConfig(pt_min=0.0),
                )
                for i in range(4)
            )
        ),
    )
    write_shards(graphs, folder / "phi2", PartitionOptions(n_parts=2, method="phi"), progress=False)
    write_shards(
        graphs,
        folder / "phi2-margin2",
        PartitionOptions(n_parts=2, method="phi", margin=2),
        progress=False,
    )
    return {name: _train(folder, name, *RUNS[name], graphs) for name in runs}


def _train(
    folder: Path, name: str, mode: str, shards: str | None, processes: int, graphs: Path
) -> str:
    run_dir = folder / f"run-{name}"
    config = folder / f"{name}.yaml"
    data = {"graphs": str(graphs), "val_events": 1}
    if shards is not None:
        data["shards"] = str(folder / shards)
    config.write_text(
        yaml.safe_dump(
            {
                "mode": mode,
                "data": data,
                "model": {"hidden": 16, "steps": 3, "recompute": True},
                "optim": {"epochs": 2, "lr": 0.003, "warmup_steps": 1},
                "run": {
                    "dir": str(run_dir),
                    "device": "cpu",
                    "dtype": "float64",
                    "hide_communication": True,
                    "progress": False,
                    "tensorboard": False,
                },
            }
        )
    )
    command = [*partgnn_launcher(processes), "train", "--config", str(config)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=540)
    if result.returncode != 0:
        sys.exit(f"{name}: training failed:\n{result.stderr[-3000:]}")
    return _weights_hash(run_dir / "checkpoints" / "last.pt")


def _weights_hash(checkpoint: Path) -> str:
    import torch

    state = torch.load(checkpoint, map_location="cpu", weights_only=True)["model"]
    digest = hashlib.sha256()
    for key in sorted(state):
        digest.update(key.encode())
        digest.update(state[key].contiguous().numpy().tobytes())
    return digest.hexdigest()


if __name__ == "__main__":
    main()
