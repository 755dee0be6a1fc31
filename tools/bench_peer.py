"""partgnn's Interaction Network side by side with the reference pipeline's (acorn's).

Same random graph, same hyper-parameters (hidden, graph iterations, 2-layer MLPs, SiLU, LayerNorm,
sum aggregation, one edge and one node network shared by all iterations), same thread count, one
process per model, alternating, ``--rounds`` times:

- **time and peak RSS**: the peer runs as ``PEER/peer_acorn.py`` (its harness, as
  written, float32); partgnn's model runs the same loop (AdamW, BCE with logits, median step
  time, ``ru_maxrss``) in each of ``--variants``: recomputation on or off, with
  ``model.fused`` (``+fused``) and under bf16 autocast (``+bf16``);
- **bytes kept for the backward pass**: one training step of each model (after a warm-up
  step) with the C allocator's bytes in use read after every op: those in use after the loss
  minus those before the forward, divided by edges x iterations (what a step keeps per edge
  for the backward pass), and the peak over the whole step (forward, backward, recomputation,
  optimizer) above the bytes in use before it.

Prints markdown; ratios are partgnn / peer of the same round (``--record`` puts their medians
over the rounds on the current-figures page). The peer's source is read from ``--acorn-src``
(see PEER/README.md), never copied::

    .venv/bin/python tools/bench_peer.py --acorn-src /tmp/acorn-src --nodes 100000 \\
        --edges 1000000 --threads 2 --steps 3 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from _common import ToolParser, record_table
from _step_models import PEER_DIR, check_peer_source, load_peer, partgnn_model, peer_model


def main() -> None:
    parser = ToolParser(__doc__, figures="step_time")
    parser.add_argument("--acorn-src", type=Path, default=Path("/tmp/acorn-src"))
    parser.add_argument("--peer-dir", type=Path, default=PEER_DIR)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--edges", type=int, default=100_000)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--iters", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3, help="timed training steps per process")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--worker", choices=["partgnn", "profile-peer", "profile-partgnn"])
    parser.add_argument("--graph", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--recompute", choices=["on", "off"], default="on")
    parser.add_argument(
        "--variants", nargs="+", default=["on", "off"],
        help="partgnn's settings to compare: recomputation on|off, then +fused (model.fused) "
        "and/or +bf16 (bf16 autocast), e.g. on on+fused on+fused+bf16",
    )  # fmt: skip
    parser.add_argument("--fused", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bf16", action="store_true", help=argparse.SUPPRESS)
    parser.tiny(nodes=1000, edges=5000, hidden=8, iters=2, steps=1, rounds=1, threads=1)
    args = parser.parse_args()
    if args.worker:
        torch.set_num_threads(args.threads)
        _worker(args)
        return
    check_peer_source(args.acorn_src, args.peer_dir)
    with tempfile.TemporaryDirectory() as folder:
        graph = Path(folder) / "graph.npz"
        _write_graph(graph, args.nodes, args.edges)
        _compare(args, graph)


def _write_graph(path: Path, n_nodes: int, n_edges: int) -> None:
    """A random graph: 3 node features, edges without self-loops, 10% true edges."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n_nodes, 3)).astype(np.float32)
    src = rng.integers(0, n_nodes, n_edges)
    dst = (src + rng.integers(1, n_nodes, n_edges)) % n_nodes
    y = (rng.random(n_edges) < 0.1).astype(np.float32)
    np.savez(path, x=x, edge_index=np.stack([src, dst]).astype(np.int64), y=y)


def _compare(args: argparse.Namespace, graph: Path) -> None:
    common = ["--hidden", str(args.hidden), "--threads", str(args.threads)]
    common += ["--steps", str(args.steps), "--graph", str(graph)]
    peer = [
        str(args.peer_dir / "peer_acorn.py"),
        "--acorn-src",
        str(args.acorn_src),
        "--iters",
        str(args.iters),
        *common,
    ]
    ours = [__file__, "--worker", "partgnn", "--iters", str(args.iters), *common]
    flags = {variant: _variant_flags(variant) for variant in args.variants}  # refused up front
    runs: dict[str, list[dict]] = {"peer": [], **{variant: [] for variant in args.variants}}
    for _ in range(args.rounds):
        runs["peer"].append(_run(peer))
        for variant in args.variants:
            runs[variant].append(_run([*ours, *flags[variant]]))
    profiles = {
        "peer": _run([__file__, "--worker", "profile-peer", "--acorn-src", str(args.acorn_src),
                      "--peer-dir", str(args.peer_dir), "--iters", str(args.iters), *common]),
    }  # fmt: skip
    for variant in args.variants:
        profiles[variant] = _run(
            [__file__, "--worker", "profile-partgnn", "--iters", str(args.iters), *common,
             *flags[variant]]
        )  # fmt: skip
    _print_tables(args, runs, profiles)
    record_table(
        args.record, f"peer-{args.edges}",
        f"partgnn's step against acorn's InteractionGNN (peer harness, recomputing, float32) on "
        f"a random graph of {args.nodes:,} nodes and {args.edges:,} edges, hidden {args.hidden}, "
        f"{args.iters} iterations, {args.threads} threads: step time and peak RSS as a multiple "
        f"of the peer's (median over {args.rounds} rounds)",
        [_ratios(variant, runs) for variant in args.variants],
        row_label="recompute {recompute}", column_label="{options}",
        cell="{step_x:.2f}x time, {rss_x:.2f}x RSS",
    )  # fmt: skip


def _ratios(variant: str, runs: dict) -> dict:
    """A variant's step time and peak RSS over the peer's, median over the rounds."""
    recompute, *options = variant.split("+")
    pairs = list(zip(runs[variant], runs["peer"], strict=True))
    return {
        "recompute": recompute, "options": " + ".join(options) or "plain",
        "step_x": statistics.median(ours["step_s"] / peer["step_s"] for ours, peer in pairs),
        "rss_x": statistics.median(
            ours["peak_rss_gb"] / peer["peak_rss_gb"] for ours, peer in pairs
        ),
    }  # fmt: skip


def _variant_flags(variant: str) -> list[str]:
    """The worker's flags for a variant ``on|off[+fused][+bf16]``."""
    recompute, *options = variant.split("+")
    if recompute not in ("on", "off") or not set(options) <= {"fused", "bf16"}:
        sys.exit(f"--variants: {variant!r} is not on|off[+fused][+bf16]")
    return ["--recompute", recompute, *(f"--{option}" for option in options)]


def _variant_name(variant: str) -> str:
    recompute, *options = variant.split("+")
    return f"partgnn recompute {recompute}{''.join(f' + {option}' for option in options)}"


def _run(command: list[str]) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=command[command.index("--threads") + 1])
    done = subprocess.run(
        [sys.executable, *command], capture_output=True, text=True, env=env, check=False
    )
    if done.returncode:
        sys.exit(f"{' '.join(command[:3])}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _print_tables(args: argparse.Namespace, runs: dict, profiles: dict) -> None:
    print(
        f"graph: {args.nodes:,} nodes, {args.edges:,} edges; hidden {args.hidden}, "
        f"{args.iters} iterations, {args.threads} threads, median of {args.steps} steps per "
        f"process, {args.rounds} rounds; {os.cpu_count()} cores\n"
    )
    header = "| round | peer step s | peer peak RSS GB |"
    for variant in args.variants:
        header += f" {_variant_name(variant)}: step s (x peer) | RSS GB (x peer) |"
    print(header)
    print("|---" * (3 + 2 * len(args.variants)) + "|")
    for index, peer in enumerate(runs["peer"]):
        cells = [str(index + 1), f"{peer['step_s']:.3f}", f"{peer['peak_rss_gb']:.2f}"]
        for variant in args.variants:
            ours = runs[variant][index]
            cells += [
                f"{ours['step_s']:.3f} ({ours['step_s'] / peer['step_s']:.2f}x)",
                f"{ours['peak_rss_gb']:.2f} ({ours['peak_rss_gb'] / peer['peak_rss_gb']:.2f}x)",
            ]
        print("| " + " | ".join(cells) + " |")
    print(
        "\n| model | parameters | bytes kept for backward per edge per iteration "
        "| peak heap MB above the step's start (x peer) |"
    )
    print("|---|---|---|---|")
    peer_peak = profiles["peer"]["peak_live_mb"]
    names = {"peer": "acorn InteractionGNN (recomputation)"}
    names.update({variant: _variant_name(variant) for variant in args.variants})
    for key, name in names.items():
        profile = profiles[key]
        print(
            f"| {name} | {profile['params']:,} | {profile['kept_bytes_per_edge_iter']:.0f} "
            f"| {profile['peak_live_mb']:.0f} ({profile['peak_live_mb'] / peer_peak:.2f}x) |"
        )
    if not {"on", "off"} <= set(runs):
        return
    on, off = runs["on"], runs["off"]
    time_ratio = statistics.median(a["step_s"] / b["step_s"] for a, b in zip(on, off, strict=True))
    rss_ratio = statistics.median(
        a["peak_rss_gb"] / b["peak_rss_gb"] for a, b in zip(on, off, strict=True)
    )
    live_ratio = profiles["on"]["peak_live_mb"] / profiles["off"]["peak_live_mb"]
    print(
        f"\nrecomputation on / off (partgnn): step time {time_ratio:.2f}x, peak RSS "
        f"{rss_ratio:.2f}x, peak heap bytes {live_ratio:.2f}x"
    )


# --- workers ---------------------------------------------------------------------------------


def _load_graph(path: Path) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = np.load(path)
    x = torch.tensor(g["x"])
    edge_index = torch.tensor(g["edge_index"])
    src, dst = edge_index
    delta = x[dst] - x[src]
    edge_attr = torch.cat([delta, delta.norm(dim=1, keepdim=True)], dim=1)
    return x, edge_index, edge_attr, torch.tensor(g["y"]).float()


def _peer_model(args: argparse.Namespace, x: torch.Tensor, edge_index: torch.Tensor):
    """The peer's model and its forward pass on the graph (:func:`_step_models.peer_model`)."""
    load_peer(args.acorn_src, args.peer_dir)
    return peer_model({"x": x, "edge_index": edge_index}, args.hidden, iters=args.iters)


def _worker(args: argparse.Namespace) -> None:
    x, edge_index, edge_attr, y = _load_graph(args.graph)
    if args.worker == "profile-peer":
        model, logits = _peer_model(args, x, edge_index)
    else:
        model = partgnn_model(
            args.hidden,
            args.recompute == "on",
            reference=False,
            steps=args.iters,
            fused=args.fused,
            node_features=x.shape[1],
        )

        def logits() -> torch.Tensor:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                return model(x, edge_index, edge_attr).float()

    optimizer = torch.optim.AdamW(model.parameters(), 1e-3)

    def loss() -> torch.Tensor:
        return torch.nn.functional.binary_cross_entropy_with_logits(logits(), y)

    def step() -> None:
        optimizer.zero_grad()
        loss().backward()
        optimizer.step()

    params = sum(p.numel() for p in model.parameters())
    if args.worker == "partgnn":
        times = []
        for _ in range(args.steps):
            started = time.perf_counter()
            step()
            times.append(time.perf_counter() - started)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
        print(json.dumps({"params": params, "step_s": statistics.median(times),
                          "peak_rss_gb": peak}))  # fmt: skip
        return
    step()  # optimizer state and lazily built buffers exist before the profiled step
    n_edges = edge_index.shape[1]
    print(json.dumps({"params": params, **_profile_step(loss, optimizer, n_edges, args.iters)}))


def _profile_step(loss, optimizer, n_edges: int, iters: int) -> dict:
    """Heap bytes of one training step: kept after the forward, and the peak (see
    :mod:`partgnn.memory.meters`)."""
    from partgnn.memory.meters import HeapMeter

    optimizer.zero_grad(set_to_none=True)
    with HeapMeter() as meter:
        value = loss()
        kept = meter.now()
        value.backward()
        optimizer.step()
    return {
        "kept_bytes_per_edge_iter": kept / (n_edges * iters),
        "peak_live_mb": meter.peak / 1e6,
    }


if __name__ == "__main__":
    main()
