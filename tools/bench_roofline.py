"""How close a training step comes to this machine's arithmetic limit (issue 26).

Measures the machine's matmul rate (float32 and bf16, square matrices and the model's own shape
``(E x H) @ (H x H)``), then times training steps of the Interaction Network (H = 64, 8 steps,
shared weights, SiLU, LayerNorm, checkpointing on) on a random graph whose edges are sorted by
source node as the graph builder writes them, phase by phase: forward,
backward (with the recomputation of the checkpointed regions), optimizer. Each phase's matmul
FLOPs are counted by ``torch.utils.flop_counter.FlopCounterMode`` (every ``mm``/``addmm``
really run, the recomputation included) and checked against the analytic count written out in
:func:`analytic_flops`. Prints markdown rows; ``--record`` puts each step's time and rate on the
current-figures page:

    OMP_NUM_THREADS=2 .venv/bin/python tools/bench_roofline.py --edges 200000 1000000

The step's rate is the counted FLOPs over its wall time; "of fp32 peak" divides by the measured
square float32 rate, "FLOP-bound time" is the counted FLOPs at the measured rate of the step's
own precision (square matrices).
"""

from __future__ import annotations

import itertools
import os
import time
from contextlib import nullcontext

import torch
from _common import ON_OFF_CHOICES, ToolParser, on_off_settings, record_table
from torch.utils.flop_counter import FlopCounterMode

HIDDEN = 64
STEPS = 8


def main() -> None:
    parser = ToolParser(__doc__.split("\n\n")[0], figures="step_time")
    parser.add_argument("--edges", type=int, nargs="+", default=[200_000, 1_000_000])
    parser.add_argument("--edges-per-node", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="timed steps (after one warm-up)")
    parser.add_argument("--precisions", nargs="+", default=["float32", "bf16"])
    parser.add_argument(
        "--fused", choices=ON_OFF_CHOICES, default="both",
        help="model.fused: LayerNorm and activation in one pass per row (default: both rows)",
    )  # fmt: skip
    parser.add_argument(
        "--profile", action="store_true", help="also print where one step's time goes, by op"
    )
    parser.add_argument(
        "--matmul-size", type=int, default=2048,
        help="side of the square matrices whose product measures the machine's rate",
    )  # fmt: skip
    parser.add_argument(
        "--matmul-rows", type=int, default=200_000, help="rows of the model-shaped product"
    )
    # Tiny: small products (a 2048^2 bf16 product takes ~1 min where bf16 is not native, AVX2).
    parser.tiny(edges=[4000], repeats=1, precisions=["float32"], threads=1, matmul_size=128,
                matmul_rows=2000)  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{os.cpu_count()} cores, {args.threads} threads, torch {torch.__version__}, "
          f"CPU capability {torch.backends.cpu.get_cpu_capability()}\n")  # fmt: skip
    peaks = machine_peaks(args.matmul_size, args.matmul_rows, sorted({"float32", *args.precisions}))
    print("| matmul | " + " | ".join(f"{p} GFLOP/s" for p in sorted({"float32", *args.precisions}))
          + " |")  # fmt: skip
    print("|---|" + "---|" * len({"float32", *args.precisions}))
    size, rows = args.matmul_size, args.matmul_rows
    for shape in (f"square {size}", f"model ({rows:.0e} x {HIDDEN}) @ ({HIDDEN} x {HIDDEN})"):
        key = shape.split()[0]
        values = " | ".join(f"{peaks[p, key]:.0f}" for p in sorted({"float32", *args.precisions}))
        print(f"| {shape} | {values} |")
    variants = on_off_settings(args.fused)
    if True in variants:
        from partgnn.models.cpu_kernels import KernelBuild, load_kernels

        load_kernels()
        print(f"\nfused kernels compiled or loaded in {KernelBuild.seconds:.1f} s")
    print(
        "\n| edges | precision | fused | step (s) | forward (s) | backward + recompute (s) "
        "| optimizer (s) | counted GFLOP | analytic GFLOP | GFLOP/s | of fp32 peak "
        "| x own FLOP-bound time | fwd / bwd GFLOP/s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    measurements = []
    for edges in args.edges:
        nodes = edges // args.edges_per_node
        for precision, fused in itertools.product(args.precisions, variants):
            row = time_steps(nodes, edges, precision, args.repeats, fused=fused)
            total = row["forward_flops"] + row["backward_flops"]
            step = row["forward_s"] + row["backward_s"] + row["optimizer_s"]
            rate = total / step / 1e9
            bound = total / (peaks[precision, "square"] * 1e9)
            print(
                f"| {edges:.0e} | {precision} | {'on' if fused else 'off'} | {step:.3f} "
                f"| {row['forward_s']:.3f} "
                f"| {row['backward_s']:.3f} | {row['optimizer_s']:.3f} | {total / 1e9:.1f} "
                f"| {analytic_flops(nodes, edges) / 1e9:.1f} | {rate:.0f} "
                f"| {rate / peaks['float32', 'square']:.2f} | {step / bound:.1f} "
                f"| {row['forward_flops'] / row['forward_s'] / 1e9:.0f} / "
                f"{row['backward_flops'] / row['backward_s'] / 1e9:.0f} |",
                flush=True,
            )
            measurements.append({
                "edges": edges, "precision": precision, "fused": "on" if fused else "off",
                "step_s": step, "gflops": rate, "of_peak": rate / peaks["float32", "square"],
                "x_bound": step / bound,
            })  # fmt: skip
    record_table(
        args.record, f"roofline-{torch.backends.cpu.get_cpu_capability()}",
        f"The roofline model's training step (Interaction Network, H = {HIDDEN}, "
        f"{args.edges_per_node} edges per node) on {args.threads} threads, CPU capability "
        f"{torch.backends.cpu.get_cpu_capability()}: step time, the matmul rate it reaches "
        f"(GFLOP/s, and as a share of the float32 square-matmul rate, "
        f"{peaks['float32', 'square']:.0f} GFLOP/s) and the step over its own FLOP-bound time",
        measurements, row_label="{edges:,} edges, {precision}", column_label="fused {fused}",
        cell="{step_s:.3f} s, {gflops:.0f} GFLOP/s ({of_peak:.2f}), {x_bound:.1f}x",
    )  # fmt: skip
    if args.profile:
        for edges in args.edges:
            for precision, fused in itertools.product(args.precisions, variants):
                profile_step(edges // args.edges_per_node, edges, precision, fused=fused)


def profile_step(
    nodes: int, edges: int, precision: str, top: int = 12, *, fused: bool = False
) -> None:
    """Prints the ops that take most of one training step's time (self CPU time)."""
    from torch.profiler import ProfilerActivity, profile

    time_steps(nodes, edges, precision, repeats=0, count_flops=False, fused=fused)  # warm up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        time_steps(nodes, edges, precision, repeats=0, count_flops=False, fused=fused)
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events)
    events.sort(key=lambda e: e.self_cpu_time_total, reverse=True)
    print(f"\nWhere the time goes: {edges:.0e} edges, {precision}, fused {'on' if fused else 'off'}"
          " (self CPU time of one step)\n")  # fmt: skip
    print("| op | share | calls |")
    print("|---|---|---|")
    for event in events[:top]:
        print(f"| {event.key} | {100 * event.self_cpu_time_total / total:.1f} % "
              f"| {event.count} |")  # fmt: skip


def machine_peaks(
    size: int = 2048, n_rows: int = 200_000, precisions: list[str] | None = None
) -> dict[tuple[str, str], float]:
    """Measured matmul GFLOP/s by (precision, shape): square ``size`` matrices and the model's
    shape, ``n_rows`` rows times a hidden-width weight."""
    peaks = {}
    dtypes = {"float32": torch.float32, "bf16": torch.bfloat16}
    for precision in precisions or list(dtypes):
        dtype = dtypes[precision]
        square = torch.randn(size, size, dtype=dtype)
        peaks[precision, "square"] = _rate(lambda s=square: s @ s, 2 * size**3)
        rows, weight = (
            torch.randn(n_rows, HIDDEN, dtype=dtype),
            torch.randn(HIDDEN, HIDDEN, dtype=dtype),
        )
        peaks[precision, "model"] = _rate(lambda r=rows, w=weight: r @ w, 2 * n_rows * HIDDEN**2)
    return peaks


def _rate(run, flops: float, repeats: int = 5) -> float:
    run()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return flops / best / 1e9


def analytic_flops(nodes: int, edges: int, hidden: int = HIDDEN, steps: int = STEPS,
                   node_features: int = 3, edge_features: int = 4) -> float:  # fmt: skip
    """Matmul FLOPs of one training step as partgnn computes it (2 per multiply-add).

    Forward (lean first layers: node latents projected once per node, then gathered):
      encoders: N (F_node H + H H) + E (F_edge H + H H)
      per message-passing step: edge MLP N (2 H H) + E (H H + H H), node MLP N (3 H H + H H)
      head: N (2 H H) + E (H H + H)
    Backward: twice the forward (gradients of inputs and of weights). Recomputation, twice
    for the edge MLPs: the backward pass recomputes each region of steps (the edge encoder
    inside the first step, every step's edge and node MLPs; the head's edge MLP), and the
    chunked edge MLPs, which keep no graph in that recomputation either, run their rows'
    forward once more chunk by chunk in their own backward. Total: 3 x forward + (forward minus
    the node encoder, which keeps its graph) + the edge MLPs' rows once more.
    """
    h = hidden
    encoders = nodes * (node_features * h + h * h) + edges * (edge_features * h + h * h)
    per_step = nodes * 2 * h * h + edges * 2 * h * h + nodes * 4 * h * h
    head = nodes * 2 * h * h + edges * (h * h + h)
    forward = encoders + steps * per_step + head
    recompute = forward - nodes * (node_features * h + h * h)
    chunk_rows = edges * (steps * 2 * h * h + h * h + h + edge_features * h + h * h)
    return 2.0 * (3 * forward + recompute + chunk_rows)


def time_steps(
    nodes: int,
    edges: int,
    precision: str,
    repeats: int,
    *,
    count_flops: bool = True,
    fused: bool = False,
) -> dict[str, float]:
    """Forward, backward and optimizer seconds (the best of ``repeats``) and counted FLOPs."""
    from partgnn.models.compute_policy import ComputePolicy
    from partgnn.models.interaction_network import InteractionNetwork
    from partgnn.train.loss import edge_loss

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(nodes, 3, generator=generator)
    edge_attr = torch.randn(edges, 4, generator=generator)
    edge_index = torch.randint(0, nodes, (2, edges), generator=generator)
    # Sorted by source then target, as the graph builder writes edges (grouped by inner hit).
    edge_index = edge_index[:, torch.argsort(edge_index[0] * nodes + edge_index[1])]
    y = (torch.rand(edges, generator=generator) < 0.1).float()
    torch.manual_seed(0)
    model = InteractionNetwork(node_features=3, edge_features=4, hidden=HIDDEN, steps=STEPS,
                               activation="silu", shared_weights=True,
                               compute=ComputePolicy(recompute=True, fused=fused))  # fmt: skip
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    bf16 = precision == "bf16"

    def forward():
        with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else nullcontext():
            logits = model(x, edge_index, edge_attr)
        return edge_loss(logits.float(), y, 1.0, float(edges))

    best = {"forward_s": float("inf"), "backward_s": float("inf"), "optimizer_s": float("inf")}
    flops = {}
    for repeat in range(repeats + 1):
        optimizer.zero_grad()
        counting = FlopCounterMode(display=False) if repeat == 0 and count_flops else None
        with counting or nullcontext():
            start = time.perf_counter()
            loss = forward()
            forward_s = time.perf_counter() - start
            if counting is not None:
                flops["forward_flops"] = counting.get_total_flops()
            start = time.perf_counter()
            loss.backward()
            backward_s = time.perf_counter() - start
            if counting is not None:
                flops["backward_flops"] = counting.get_total_flops() - flops["forward_flops"]
        start = time.perf_counter()
        optimizer.step()
        optimizer_s = time.perf_counter() - start
        if repeat:  # the first step warms up (and counts)
            best["forward_s"] = min(best["forward_s"], forward_s)
            best["backward_s"] = min(best["backward_s"], backward_s)
            best["optimizer_s"] = min(best["optimizer_s"], optimizer_s)
    return {**best, **flops}


if __name__ == "__main__":
    main()
