"""How much memory one training step of a model takes per edge and per node, measured on probes.

A training step's memory beyond its inputs (activations kept for the backward pass, the
backward's temporaries, gradients, optimizer state) grows linearly with the edges and nodes of
the graph the rank computes, at a rate set by the model (width, steps, checkpointing, dtype,
MLP layers) and by how partgnn computes it (chunked edge MLPs, regions of steps). Rather than
re-deriving that rate by hand for every setting (and getting it wrong when the model changes),
:func:`measure_footprint` runs real training steps of the configured model on three random
graphs of ~10^5 edges (large enough that the chunked edge MLPs work in chunks of ``E / 16``,
as on a full event) and fits ``bytes = per_edge * E + per_node * N + constant`` to their peaks.

In modes ``halo`` and ``naive`` the probes run the way a rank does: with a halo exchange (a
loop-back one: :data:`PROBE_HALO_FRACTION` of the nodes are halo copies of owned nodes), and
overlapped with the interior edges when ``run.overlap`` is on, so the edge reordering and the
chunked edge MLPs of that path are measured too.

On the CPU a peak is glibc's bytes in use (:class:`~partgnn.models.memory_probe.HeapMeter`),
on CUDA ``torch.cuda.max_memory_allocated``; both count live tensors, not the interpreter.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch

from partgnn.models.build import build_model
from partgnn.models.memory_probe import HeapMeter, heap_meter_available
from partgnn.models.replayed_exchange import ReceivedRows
from partgnn.train.config import TrainConfig

#: Probe graphs ``(nodes, edges)``: two edge densities and two sizes, so edges, nodes and the
#: constant are told apart. Every one has >= 16 * 4096 edges (chunks of E / 16).
PROBE_GRAPHS: tuple[tuple[int, int], ...] = ((16_384, 131_072), (8_192, 131_072), (16_384, 262_144))


#: Fraction of a probe graph's nodes that are halo nodes in the halo modes (4-12 % on METIS
#: partitions of pile-up-200 graphs at P = 2-8).
PROBE_HALO_FRACTION = 0.08


@dataclass(frozen=True)
class Footprint:
    """Peak bytes of one training step above its inputs: ``per_edge * E + per_node * N +
    constant`` for a graph of ``N`` local nodes and ``E`` local edges.

    Attributes:
        per_edge: Bytes per local edge.
        per_node: Bytes per local node (owned or halo).
        constant: Bytes independent of the graph (parameters' gradients, optimizer state).
        probes: The measured ``(nodes, edges, peak bytes)`` the fit came from.
    """

    per_edge: float
    per_node: float
    constant: float
    probes: tuple[tuple[int, int, int], ...]

    def bytes(self, nodes: int, edges: int) -> float:
        """Predicted peak bytes for ``nodes`` local nodes and ``edges`` local edges."""
        return self.per_edge * edges + self.per_node * nodes + self.constant


def measure_footprint(
    config: TrainConfig, node_features: int, edge_features: int, device: torch.device
) -> Footprint:
    """Measures one training step's peak memory per edge and per node for a run config's model.

    Args:
        config: The run config (``model``, ``run.dtype``, ``run.bf16``, ``optim`` are read).
        node_features: Width ``F_node`` of the node inputs.
        edge_features: Width ``F_edge`` of the edge inputs.
        device: Where the run trains (``cpu`` or ``cuda``).

    Raises:
        RuntimeError: On the CPU without glibc's ``mallinfo2`` (nothing to measure with).
    """
    if device.type == "cpu" and not heap_meter_available():
        raise RuntimeError("measuring memory on the CPU needs glibc's mallinfo2 (glibc >= 2.33)")
    generator = torch.Generator().manual_seed(0)
    probes = tuple(
        (
            nodes,
            edges,
            _step_peak(config, node_features, edge_features, device, nodes, edges, generator),
        )
        for nodes, edges in PROBE_GRAPHS
    )
    design = np.array([[edges, nodes, 1.0] for nodes, edges, _ in probes])
    peaks = np.array([peak for _, _, peak in probes], dtype=np.float64)
    per_edge, per_node, constant = np.linalg.lstsq(design, peaks, rcond=None)[0]
    return Footprint(float(per_edge), float(per_node), float(constant), probes)


def _step_peak(
    config: TrainConfig,
    node_features: int,
    edge_features: int,
    device: torch.device,
    nodes: int,
    edges: int,
    generator: torch.Generator,
) -> int:
    """Peak bytes above its inputs of one training step (forward, backward, AdamW) on a random
    graph of ``nodes`` nodes and ``edges`` edges."""
    from partgnn.train.trainer import edge_loss

    dtype = torch.float64 if config.run.dtype == "float64" else torch.float32
    x = torch.randn(nodes, node_features, generator=generator).to(device, dtype)
    edge_attr = torch.randn(edges, edge_features, generator=generator).to(device, dtype)
    edge_index = torch.randint(0, nodes, (2, edges), generator=generator).to(device)
    y = (torch.rand(edges, generator=generator) < 0.1).to(device, dtype)
    exchange = None
    if config.mode in ("halo", "naive"):
        n_halo = int(nodes * PROBE_HALO_FRACTION)
        send_index = torch.randperm(nodes - n_halo, generator=generator)[:n_halo].to(device)
        exchange = LoopbackExchange(send_index, nodes - n_halo, overlap=config.run.overlap)
    autocast = (
        torch.autocast(device.type, dtype=torch.bfloat16) if config.run.bf16 else nullcontext()
    )

    def step() -> None:
        # Built inside the measurement: parameters, gradients and AdamW's state are counted.
        model = build_model(config.model, node_features, edge_features).to(device, dtype)
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.optim.lr)
        with autocast:
            logits = model(x, edge_index, edge_attr, exchange=exchange)
        edge_loss(logits.to(dtype), y, config.loss.pos_weight, float(edges)).backward()
        optimizer.step()

    if device.type == "cuda":
        torch.cuda.synchronize(device)
        start = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        torch.cuda.synchronize(device)
        return int(torch.cuda.max_memory_allocated(device) - start)
    with HeapMeter() as meter:
        step()
    return int(meter.peak)


class LoopbackExchange:
    """A halo exchange within one process: the halo rows are copies of owned rows
    ``send_index``, so a model runs its halo path (blocking or overlapped) without peers.

    Args:
        send_index: Owned row each halo row copies ``(n_halo,)``.
        n_owned: Owned rows.
        overlap: Offer the overlapped path (``start`` / ``start_reverse``).
    """

    def __init__(self, send_index: torch.Tensor, n_owned: int, *, overlap: bool) -> None:
        self.send_index = send_index
        self.n_owned = n_owned
        self.n_halo = int(send_index.shape[0])
        self.can_overlap = overlap

    def __call__(self, x_owned: torch.Tensor) -> torch.Tensor:
        return torch.cat([x_owned, x_owned[self.send_index]])

    def start(self, x_owned: torch.Tensor) -> ReceivedRows:
        return ReceivedRows(x_owned.detach()[self.send_index].clone())

    def start_reverse(self, grad_halo: torch.Tensor) -> ReceivedRows:
        # Rows sent = halo rows here: each halo row's gradient returns to the row it copies.
        return ReceivedRows(grad_halo.clone())
