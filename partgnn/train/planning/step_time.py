"""How long one training step takes on a rank, measured on probes, and a graph group's step
predicted from it (``partgnn plan --step-time``).

:func:`measure_step_time` times real training steps (forward, backward, AdamW) of the configured
model on three random whole graphs on the run's device, as they run today or replayed as CUDA
graphs (:mod:`partgnn.train.captured_step`), and fits ``seconds = fixed + per_edge * E +
per_node * N``. ``fixed`` is what a step costs whatever its size: on a GPU mostly the host
launching kernels, which a replay removes. A graph group's step (:func:`predict_step`) is then,
as in tools/studies/bench_scaling_model.py::

    t = max_r t_r + X * (alpha + B / beta) + t_allreduce

with ``t_r`` rank r's predicted compute on its local graph, ``X = 2 (steps + 1)`` exchanges of
``B`` bytes (the largest rank's halo rows times the latent width; several ranks only), ``alpha``
and ``beta`` a link's latency and bandwidth (:data:`LINKS`), and the gradients' ring all-reduce.
The exchange is counted whole (not hidden behind the interior edges), so the prediction is an
upper bound where communication is hidden.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass

import numpy as np
import torch

from partgnn.models.build import build_model
from partgnn.train.captured_step import CapturedStep, capture_refusal
from partgnn.train.config.sections import TrainConfig
from partgnn.train.items.padded_items import shape_bucket
from partgnn.train.planning.footprint import random_train_item
from partgnn.train.planning.plan import MemoryPlan
from partgnn.train.step import StepSettings, forward_backward

#: Link bandwidth per direction [bytes/s] and point-to-point latency [s]: ``nvlink`` H100 SXM
#: NVLink 4 (450 GB/s per direction; NCCL send/recv ~4 us), ``ndr`` InfiniBand NDR, one 400 Gb/s
#: ConnectX-7 port per GPU (50 GB/s; ~15 us). Sources: tools/studies/bench_scaling_model.py's
#: docstring.
LINKS: dict[str, tuple[float, float]] = {
    "nvlink": (450e9, 4e-6),
    "ndr": (50e9, 15e-6),
}

#: ``(nodes, edges)`` of the timing probes on the CPU; on GPUs :data:`GPU_TIME_SCALE` times more
#: (from launch-bound to compute-bound: 1e4 to 1e6 edges).
TIME_PROBES = ((1_000, 8_000), (4_000, 32_000), (12_000, 96_000))
GPU_TIME_SCALE = 10


@dataclass(frozen=True)
class StepTime:
    """One training step's seconds: ``fixed + per_edge * E + per_node * N``.

    Attributes:
        fixed: Seconds whatever the graph (launches, the optimizer).
        per_edge: Seconds per local edge.
        per_node: Seconds per local node.
        probes: The measured ``(nodes, edges, seconds)`` the fit came from.
    """

    fixed: float
    per_edge: float
    per_node: float
    probes: tuple[tuple[int, int, float], ...]

    def seconds(self, nodes: int, edges: int) -> float:
        """Predicted seconds of a step over ``nodes`` nodes and ``edges`` edges."""
        return max(self.fixed + self.per_edge * edges + self.per_node * nodes, 0.0)


def time_probes(device: torch.device) -> tuple[tuple[int, int], ...]:
    """:data:`TIME_PROBES`, :data:`GPU_TIME_SCALE` times larger on GPUs."""
    scale = GPU_TIME_SCALE if device.type == "cuda" else 1
    return tuple((nodes * scale, edges * scale) for nodes, edges in TIME_PROBES)


def measure_step_time(
    config: TrainConfig,
    node_features: int,
    edge_features: int,
    device: torch.device,
    *,
    captured: bool = False,
    repeats: int = 3,
) -> StepTime:
    """Times training steps of ``config``'s model on the probe graphs (whole graphs: the
    exchange is predicted apart).

    Args:
        config: The run config (``model``, ``run.dtype``, ``run.bf16``, ``optim.lr``).
        node_features: Width of the node inputs.
        edge_features: Width of the edge inputs.
        device: Where to time.
        captured: Replay the step as CUDA graphs (a GPU only).
        repeats: Timed steps per probe (the median); one step (captured: two) before them.
    """
    whole = dataclasses.replace(config, mode="full")
    settings = StepSettings.of(whole, device)
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(whole.run.seed)
    probes = []
    for nodes, edges in time_probes(device):
        model = build_model(whole.model, node_features, edge_features)
        model = model.to(device, settings.dtype)
        optimizer = torch.optim.AdamW(model.parameters(), lr=whole.optim.lr)
        item = random_train_item(whole, node_features, edge_features, device, nodes, edges,
                                 generator)  # fmt: skip
        run = CapturedStep(model, settings) if captured else None
        seconds = []
        for _ in range(repeats + (2 if captured else 1)):
            _synchronize(device)
            start = time.perf_counter()
            optimizer.zero_grad(set_to_none=False)
            if run is not None:
                run(item)
            else:
                forward_backward(model, item, settings)
            optimizer.step()
            _synchronize(device)
            seconds.append(time.perf_counter() - start)
        probes.append((nodes, edges, statistics.median(seconds[-repeats:])))
        del model, optimizer, item, run
    design = np.array([[edges, nodes, 1.0] for nodes, edges, _ in probes])
    measured = np.array([s for _, _, s in probes])
    per_edge, per_node, fixed = np.linalg.lstsq(design, measured, rcond=None)[0]
    return StepTime(float(fixed), float(per_edge), float(per_node), tuple(probes))


@dataclass(frozen=True)
class StepPrediction:
    """A graph group's predicted training step in one setting.

    Attributes:
        recompute: ``model.recompute``.
        captured: Replayed as CUDA graphs.
        compute_s: The slowest rank's compute.
        exchange_s: The step's halo exchanges (0 on one rank).
        allreduce_s: The gradients' all-reduce (0 on one rank).
        peak_bytes: The largest rank's predicted peak memory (``None``: not measured for
            this recomputation setting; ``partgnn plan --memory-gb`` measures both).
    """

    recompute: bool
    captured: bool
    compute_s: float
    exchange_s: float
    allreduce_s: float
    peak_bytes: float | None

    @property
    def step_s(self) -> float:
        return self.compute_s + self.exchange_s + self.allreduce_s


def communication_seconds(
    *, group_size: int, halo_rows: int, row_bytes: int, exchanges: int, gradient_bytes: int,
    link: str,
) -> tuple[float, float]:  # fmt: skip
    """The step's halo exchanges and gradient all-reduce on ``link`` [s] (0 for one rank)."""
    if group_size == 1:
        return 0.0, 0.0
    bandwidth, latency = LINKS[link]
    exchange = exchanges * (latency + halo_rows * row_bytes / bandwidth)
    fraction = 2 * (group_size - 1) / group_size
    allreduce = fraction * gradient_bytes / bandwidth + 2 * (group_size - 1) * latency
    return exchange, allreduce


def fastest(predictions: list[StepPrediction], budget_bytes: float | None) -> StepPrediction | None:
    """The fastest setting whose peak fits ``budget_bytes`` (any, without a budget); ``None``
    when none fits."""
    fitting = [
        p for p in predictions
        if budget_bytes is None or (p.peak_bytes is not None and p.peak_bytes <= budget_bytes)
    ]  # fmt: skip
    return min(fitting, key=lambda p: p.step_s) if fitting else None


def plan_step_times(
    config: TrainConfig, plan: MemoryPlan, widths: tuple[int, int], *, link: str = "nvlink"
) -> list[StepPrediction]:
    """The group's predicted step in each setting: recomputation as configured and the other
    way (a model of one's own: as configured), uncaptured and, on a GPU where a step can be
    captured, replayed (its peak: the padded shapes' extra bytes at the config's footprint).

    Args:
        config: The run config.
        plan: Its memory plan (the ranks' largest graphs, the peaks).
        widths: Node and edge input widths.
        link: What joins the group's GPUs (:data:`LINKS`).
    """
    device = plan.device
    model = config.model
    can_capture = device.type == "cuda" and capture_refusal(
        "on", device, batch_norm=model.batch_norm, own_model=model.target is not None,
        group_size=1, host_staging=False,
    ) is None  # fmt: skip
    settings = StepSettings.of(config, device)
    value_bytes = 2 if settings.bf16 else torch.finfo(settings.dtype).bits // 8
    n_parameters = sum(p.numel() for p in build_model(model, *widths).parameters())
    exchange, allreduce = communication_seconds(
        group_size=plan.group_size, halo_rows=max(r.halo for r in plan.ranks),
        row_bytes=model.hidden * value_bytes, exchanges=2 * (model.steps + 1),
        gradient_bytes=n_parameters * torch.finfo(settings.dtype).bits // 8, link=link,
    )  # fmt: skip
    padding = max(
        plan.footprint.bytes(shape_bucket(r.nodes + 1), shape_bucket(r.edges))
        - plan.footprint.bytes(r.nodes, r.edges)
        for r in plan.ranks
    )
    choice = plan.recompute_choice
    predictions = []
    for recompute in (model.recompute,) if model.target else (model.recompute, not model.recompute):
        peak = plan.peak_bytes if recompute == model.recompute else None
        if choice is not None:
            peak = choice.peak_on if recompute else choice.peak_off
        setting = dataclasses.replace(config, model=dataclasses.replace(model, recompute=recompute))
        for captured in (False, True) if can_capture else (False,):
            step = measure_step_time(setting, *widths, device, captured=captured)
            compute = max(
                step.seconds(shape_bucket(r.nodes + 1), shape_bucket(r.edges))
                if captured else step.seconds(r.nodes, r.edges)
                for r in plan.ranks
            )  # fmt: skip
            extra = padding if captured and peak is not None else 0.0
            predictions.append(StepPrediction(
                recompute, captured, compute, exchange, allreduce,
                None if peak is None else peak + extra,
            ))  # fmt: skip
    return predictions


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
