"""How much memory one training step of a model takes per edge and per node, measured on probes.

A training step's memory beyond its inputs (activations kept for the backward pass, the
backward's temporaries, gradients, optimizer state) grows linearly with the edges and nodes of
the graph the rank computes, at a rate set by the model (width, steps, recomputation, dtype,
MLP layers) and by how partgnn computes it (chunked edge MLPs, regions of steps). Rather than
re-deriving that rate by hand for every setting (and getting it wrong when the model changes),
:func:`measure_footprint` runs real training steps of the configured model on three random
graphs of ~10^5 edges (large enough that the chunked edge MLPs work in chunks of ``E / 16``,
as on a full event) and fits ``bytes = per_edge * E + per_node * N + constant`` to their peaks.

In modes ``halo`` and ``naive`` the probes run the way a rank does: with a halo exchange (a
loop-back one: :data:`PROBE_HALO_FRACTION` of the nodes are halo copies of owned nodes), and
hidden behind the interior edges when ``run.hide_communication`` is on, so the edge reordering
and the chunked edge MLPs of that path are measured too.

A peak is a count of live bytes: glibc's bytes in use on the CPU
(:class:`~partgnn.memory.meters.HeapMeter`), ``torch.cuda.max_memory_allocated`` on CUDA.
What a rank holds is more: glibc keeps freed chunks resident between live ones (and one op's
temporaries come and go between two counts); torch's CUDA allocator keeps freed blocks reserved.
A fourth probe, large enough that its edge tensors are mapped whole as on a rank
(:func:`resident_probe_graph`), measures that too (the growth of the resident set, Linux
``VmHWM``; CUDA's peak reserved bytes), and the prediction is scaled by the ratio. The ratio
depends on whether the chunked edge MLPs give their freed heap back (they do on graphs of event
size, :class:`~partgnn.memory.heap_release.HeapReleasePolicy`), so with recomputation that probe
runs both ways: :attr:`Footprint.resident_factor` and :attr:`Footprint.released_factor`. On
the pile-up-200 event with recomputation the live bytes alone were 17-24 % below the ranks'
peak RSS (docs/history/training.md, "Memory planner").
"""

from __future__ import annotations

import gc
from dataclasses import dataclass

import numpy as np
import torch

from partgnn.distributed.in_process_exchanges import LoopbackExchange
from partgnn.distributed.interior_first import InteriorFirst
from partgnn.memory.heap_release import (
    ALWAYS_RELEASE_HEAP,
    DEFAULT_HEAP_RELEASE,
    HeapReleasePolicy,
)
from partgnn.memory.meters import (
    HeapMeter,
    ResidentMeter,
    heap_meter_available,
    resident_meter_available,
)
from partgnn.models.build import build_model
from partgnn.train.config.sections import TrainConfig
from partgnn.train.items.train_item import TrainItem
from partgnn.train.loss import weighted_count
from partgnn.train.step import StepSettings, forward_backward
from partgnn.train.strategies import mode_facts, orders_interior_first

#: Probe graphs ``(nodes, edges)``: two edge densities and two sizes, so edges, nodes and the
#: constant are told apart. Every one has >= 16 * 4096 edges (chunks of E / 16).
PROBE_GRAPHS: tuple[tuple[int, int], ...] = ((16_384, 131_072), (8_192, 131_072), (16_384, 262_144))

#: On GPUs the probe graphs are this much larger: their edge MLPs run in one chunk, as an
#: event's do there (:mod:`~partgnn.models.chunk_size`: up to 1e6 edges of width 128 on a GPU of
#: 32 GB), and the allocator's rounding is small next to what they allocate.
GPU_PROBE_SCALE = 4

#: The graph that measures what the process holds per live byte has edge tensors ``(E, H)`` of
#: at least this many float32 bytes: twice glibc's largest mmap threshold (32 MiB), so that, as
#: on an event-sized rank, they are mapped and unmapped whole while the chunks' temporaries
#: share the heap. (At exactly 32 MiB, E = 262,144 at H = 32, the held bytes were 1.6x the live
#: ones without recomputation; at 442k edges 1.1x, as on the ranks.)
RESIDENT_PROBE_EDGE_BYTES = 64 * 2**20

#: Nodes per edge of that graph (pile-up-200 events have ~13 edges per node).
RESIDENT_PROBE_EDGES_PER_NODE = 16


#: A first step this small runs before the probes, so one-off allocations (kernels' and
#: threads' first use) are not counted in the probes.
WARM_UP_GRAPH = (1_024, 8_192)

#: Fraction of a probe graph's nodes that are halo nodes in the halo modes (4-12 % on METIS
#: partitions of pile-up-200 graphs at P = 2-8).
PROBE_HALO_FRACTION = 0.08


@dataclass(frozen=True)
class Footprint:
    """Peak bytes of one training step above its inputs: ``resident_factor * (per_edge * E +
    per_node * N + constant)`` for a graph of ``N`` local nodes and ``E`` local edges.

    Attributes:
        per_edge: Live bytes per local edge.
        per_node: Live bytes per local node (owned or halo).
        constant: Live bytes independent of the graph (parameters' gradients, optimizer state).
        probes: The measured ``(nodes, edges, peak live bytes)`` the fit came from.
        resident_factor: What the process holds per live byte at the step's peak (>= 1),
            measured on :func:`resident_probe_graph`.
        released_factor: The same where the edge MLPs give their freed heap back.
        edge_width: Width of the edge MLPs' first layer, which tells the graphs that release
            (``E * width``); 0 where none does (no recomputation: the graphs are kept).
    """

    per_edge: float
    per_node: float
    constant: float
    probes: tuple[tuple[int, int, int], ...]
    resident_factor: float = 1.0
    released_factor: float = 1.0
    edge_width: int = 0

    def bytes(self, nodes: int, edges: int) -> float:
        """Predicted peak bytes for ``nodes`` local nodes and ``edges`` local edges."""
        return self.factor(edges) * self.live_bytes(nodes, edges)

    def live_bytes(self, nodes: int, edges: int) -> float:
        """Predicted peak bytes of live tensors for ``nodes`` nodes and ``edges`` edges."""
        return self.per_edge * edges + self.per_node * nodes + self.constant

    def factor(self, edges: int) -> float:
        """Bytes held per live byte at the peak of a step over ``edges`` local edges."""
        if self.edge_width and DEFAULT_HEAP_RELEASE.releases(edges, self.edge_width):
            return self.released_factor
        return self.resident_factor


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
    recomputes = config.model.recompute and not config.model.target

    def peak(
        nodes: int, edges: int, heap_release: HeapReleasePolicy = DEFAULT_HEAP_RELEASE
    ) -> StepPeak:
        return _step_peak(
            config, node_features, edge_features, device, nodes, edges, generator, heap_release
        )

    peak(*WARM_UP_GRAPH)
    # First after the warm-up: held bytes measured on a heap with little history, as a rank's
    # first step finds it.
    resident_graph = resident_probe_graph(config.model.hidden, device)
    held = peak(*resident_graph)
    released = held
    if recomputes:  # only recomputing edge MLPs give their heap back during training
        released = peak(*resident_graph, ALWAYS_RELEASE_HEAP)
    probes = tuple((nodes, edges, peak(nodes, edges).live) for nodes, edges in probe_graphs(device))
    design = np.array([[edges, nodes, 1.0] for nodes, edges, _ in probes])
    peaks = np.array([live for _, _, live in probes], dtype=np.float64)
    per_edge, per_node, constant = np.linalg.lstsq(design, peaks, rcond=None)[0]
    return Footprint(
        float(per_edge),
        float(per_node),
        float(constant),
        probes,
        resident_factor=held.resident_factor,
        released_factor=released.resident_factor,
        edge_width=config.model.hidden if recomputes else 0,
    )


def probe_graphs(device: torch.device) -> tuple[tuple[int, int], ...]:
    """:data:`PROBE_GRAPHS`, :data:`GPU_PROBE_SCALE` times larger on GPUs."""
    scale = GPU_PROBE_SCALE if device.type == "cuda" else 1
    return tuple((nodes * scale, edges * scale) for nodes, edges in PROBE_GRAPHS)


def resident_probe_graph(hidden: int, device: torch.device | None = None) -> tuple[int, int]:
    """``(nodes, edges)`` of the graph that measures the bytes held per live byte for latents of
    width ``hidden`` (:data:`RESIDENT_PROBE_EDGE_BYTES`), at least the largest probe graph."""
    largest = probe_graphs(device or torch.device("cpu"))[-1][1]
    edges = max(largest, -(-RESIDENT_PROBE_EDGE_BYTES // (4 * hidden)))
    return edges // RESIDENT_PROBE_EDGES_PER_NODE, edges


@dataclass(frozen=True)
class StepPeak:
    """One probe step's peak above its inputs.

    Attributes:
        live: Most bytes of live tensors at once.
        resident: Most bytes the process held beyond its start (0: could not be measured).
    """

    live: int
    resident: int

    @property
    def resident_factor(self) -> float:
        """Bytes held per live byte (1 where the resident growth was not measured)."""
        return max(1.0, self.resident / self.live) if self.resident and self.live else 1.0


def _step_peak(
    config: TrainConfig,
    node_features: int,
    edge_features: int,
    device: torch.device,
    nodes: int,
    edges: int,
    generator: torch.Generator,
    heap_release: HeapReleasePolicy = DEFAULT_HEAP_RELEASE,
) -> StepPeak:
    """Peak bytes above its inputs of one training step (forward, backward, AdamW) on a random
    graph of ``nodes`` nodes and ``edges`` edges; the edge MLPs release heap as ``heap_release``
    says."""
    settings = StepSettings.of(config, device)
    item = random_train_item(config, node_features, edge_features, device, nodes, edges, generator)

    def step() -> None:
        # Built inside the measurement: parameters, gradients and AdamW's state are counted.
        model = build_model(
            config.model, node_features, edge_features, heap_release=heap_release
        ).to(device, settings.dtype)
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.optim.lr)
        forward_backward(model, item, settings)  # what every training step runs
        optimizer.step()

    # Garbage in reference cycles (a finished Trainer is one: its scheduler holds a bound method
    # of it) would otherwise be freed by a collection in the middle of the step, and the
    # step's peak above the start would read low (seen: 18 instead of 48 MB after other runs
    # in the same process).
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        start = torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        torch.cuda.synchronize(device)
        return StepPeak(
            live=int(torch.cuda.max_memory_allocated(device) - start[0]),
            resident=int(torch.cuda.max_memory_reserved(device) - start[1]),
        )
    if not resident_meter_available():
        with HeapMeter() as heap:
            step()
        return StepPeak(live=int(heap.peak), resident=0)
    with ResidentMeter() as resident, HeapMeter() as heap:
        step()
    return StepPeak(live=int(heap.peak), resident=int(resident.peak))


def random_train_item(
    config: TrainConfig,
    node_features: int,
    edge_features: int,
    device: torch.device,
    nodes: int,
    edges: int,
    generator: torch.Generator,
) -> TrainItem:
    """A training item of a random graph of ``nodes`` nodes and ``edges`` edges (10 % true), as
    a rank of ``config.mode`` holds one (modes that exchange: a loop-back exchange of
    :data:`PROBE_HALO_FRACTION` of the nodes), drawn on ``generator``'s device and moved to
    ``device``."""
    settings = StepSettings.of(config, device)
    dtype = settings.dtype
    where = generator.device
    x = torch.randn(nodes, node_features, generator=generator, device=where).to(device, dtype)
    edge_attr = torch.randn(edges, edge_features, generator=generator, device=where)
    edge_attr = edge_attr.to(device, dtype)
    edge_index = torch.randint(0, nodes, (2, edges), generator=generator, device=where).to(device)
    y = (torch.rand(edges, generator=generator, device=where) < 0.1).to(device, dtype)
    exchange, edge_order, n_owned = None, None, nodes
    if mode_facts(config.mode).exchanges:
        n_halo = int(nodes * PROBE_HALO_FRACTION)
        n_owned = nodes - n_halo
        send_index = torch.randperm(n_owned, generator=generator, device=where)[:n_halo]
        send_index = send_index.to(device)
        exchange = LoopbackExchange(
            send_index, n_owned, hide_communication=config.run.hide_communication
        )
        if orders_interior_first(config):  # as a training item carries it
            edge_order = InteriorFirst.of_edges(edge_index, n_owned)
    weights = settings.weights
    normaliser = weighted_count(edges, int(y.sum()), weights.pos_weight)
    weight = None
    if weights.by_pt:  # the per-edge weights training holds (particle pT up to 2 GeV)
        edge_pt = 2.0 * torch.rand(edges, generator=generator, device=where)
        weight = weights.per_edge(y, edge_pt.to(device))
    return TrainItem(
        event_id=0,
        x=x,
        edge_index=edge_index,
        edge_attr=edge_attr,
        y=y,
        counted=torch.ones(edges, dtype=torch.bool, device=device),
        boundary=torch.zeros(edges, dtype=torch.bool, device=device),
        normaliser=normaliser,
        event_normaliser=normaliser,
        exchange=exchange,
        interior_first=edge_order,
        n_owned=n_owned,
        weight=weight,
    )
