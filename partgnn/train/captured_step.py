"""A rank's training step replayed as a CUDA graph per padded shape (``run.cuda_graphs``).

A rank's share of a split event (~1e5 edges) is launch-bound on a GPU: the host issues the
forward and backward kernels more slowly than the device runs them. A CUDA graph issues them all
in one call. It replays fixed kernels on fixed buffers, so every item is first padded to its
shape (:mod:`partgnn.train.items.padded_items`: the padding contributes nothing) and each shape gets
its own graph:

1. The first item of a shape runs as today (it warms the kernels' lazy set-up up).
2. The second is captured (``torch.cuda.graph`` into one memory pool shared by the shapes'
   graphs, each replay's outputs copied out before the next), then replayed.
3. Every later one is copied into the captured item's buffers and replayed: no Python, no host
   synchronisation, no launch per kernel.

What one graph holds: the forward pass, the loss and the backward pass, the halo exchanges of a
graph group on NCCL included (``run.cuda_graphs: on``). The gradient all-reduce, the step's
one host read (loss, stop signal and non-finite flags) and AdamW run after the replay as they
run today. The bytes the captured exchanges move are counted again at every replay.

Where a step cannot be captured it runs as today, and the trainer says why in one line
(:func:`capture_refusal`): on the CPU; over gloo (no CUDA graph can hold a gloo exchange); a
model with BatchNorm (padding would change its statistics) or of the user's own (``model.target``:
nothing says padding leaves it unchanged); and, with ``auto``, graph groups of several ranks (a
captured NCCL exchange replays on every rank in lock-step; ``on`` captures them).

At most ``max_graphs`` shapes are captured; items of a further shape run as today.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal, Protocol, TypeVar, get_args

import torch
from torch import nn

from partgnn.distributed.communication_counter import CommunicationCounter
from partgnn.distributed.context import DistContext
from partgnn.distributed.halo_exchange import HaloExchanger
from partgnn.train.config.sections import TrainConfig
from partgnn.train.items.padded_items import PaddedShape, pad_item, padding_refusal
from partgnn.train.items.train_item import TrainItem
from partgnn.train.step import StepSettings, forward_backward, training_loss

CudaGraphs = Literal["auto", "on", "off"]
CUDA_GRAPHS: tuple[str, ...] = get_args(CudaGraphs)

#: Shapes captured at most (each graph keeps its kernels' parameters; the memory pool is shared).
MAX_GRAPHS = 8

T = TypeVar("T")


def capture_refusal(
    setting: str,
    device: torch.device,
    *,
    batch_norm: bool,
    own_model: bool,
    group_size: int,
    host_staging: bool,
) -> str | None:
    """Why this run's step is not captured (``None``: it is).

    Args:
        setting: ``run.cuda_graphs``.
        device: The rank's device.
        batch_norm: ``model.batch_norm``.
        own_model: The model is the user's own (``model.target``).
        group_size: Ranks of the graph group.
        host_staging: The exchange goes through host memory (gloo on a GPU).
    """
    if setting == "off":
        return "run.cuda_graphs is off"
    if device.type != "cuda":
        return f"the step runs on the {device.type.upper()}, and CUDA graphs need a GPU"
    if host_staging and group_size > 1:
        return "the halo exchange runs on gloo, which a CUDA graph cannot hold"
    refusal = padding_refusal(batch_norm)
    if refusal is not None:
        return refusal
    if own_model:
        return "model.target is a model of one's own, which padding may change"
    if group_size > 1 and setting == "auto":
        return (
            f"a graph group of {group_size} ranks exchanges inside the step "
            "(run.cuda_graphs: on captures the NCCL exchanges too)"
        )
    return None


def captured_step_for(
    config: TrainConfig,
    context: DistContext,
    model: nn.Module,
    settings: StepSettings,
    counter: CommunicationCounter | None,
) -> tuple[CapturedStep | None, str | None]:
    """The run's captured step, or ``None`` and the line that says why not (``None`` where
    nobody asked for one: ``off``, or ``auto`` on the CPU)."""
    setting = config.run.cuda_graphs
    refusal = capture_refusal(
        setting, context.device, batch_norm=config.model.batch_norm,
        own_model=config.model.target is not None, group_size=context.group_size,
        host_staging=context.host_staging,
    )  # fmt: skip
    if refusal is None:
        return CapturedStep(model, settings, counter=counter), None
    if setting == "off" or (setting == "auto" and context.device.type != "cuda"):
        return None, None
    return None, f"the step runs uncaptured: {refusal}"


class StepGraph(Protocol):
    """A recorded step: :meth:`capture` records ``run`` (its kernels do not run then), and
    :meth:`replay` runs them again on the same buffers."""

    def capture(self, run: Callable[[], T]) -> T: ...

    def replay(self) -> None: ...


class CudaStepGraph:
    """A :class:`StepGraph` on the current CUDA device, in a memory pool shared with the other
    shapes' graphs (``pool``)."""

    def __init__(self, pool: tuple[int, int]) -> None:
        self.graph = torch.cuda.CUDAGraph()
        self.pool = pool

    def capture(self, run: Callable[[], T]) -> T:
        # thread_local: the read-ahead thread keeps copying the next event meanwhile.
        with torch.cuda.graph(self.graph, pool=self.pool, capture_error_mode="thread_local"):
            return run()

    def replay(self) -> None:
        self.graph.replay()


def cuda_step_graphs() -> Callable[[], StepGraph]:
    """New :class:`CudaStepGraph` objects sharing one memory pool."""
    pool = torch.cuda.graph_pool_handle()
    return lambda: CudaStepGraph(pool)


@dataclass
class _Captured:
    """One shape's graph: its item (whose tensors are the graph's inputs), its loss output, and
    the exchanges it recorded."""

    graph: StepGraph
    item: TrainItem
    loss: torch.Tensor
    exchanges: list[tuple[str, int, int]]

    def load(self, item: TrainItem) -> None:
        """Copies ``item`` (of the same shape) into the graph's inputs."""
        for mine, theirs in zip(_inputs(self.item), _inputs(item), strict=True):
            mine.copy_(theirs, non_blocking=True)


def _inputs(item: TrainItem) -> list[torch.Tensor]:
    """The tensors of a padded item a step reads, in one order."""
    tensors = [item.x, item.edge_index, item.edge_attr, item.y, item.weight, item.normaliser]
    if isinstance(item.exchange, HaloExchanger):
        tensors.append(item.exchange.plan.send_index)
    if item.interior_first is not None:
        tensors += [item.interior_first.order, item.interior_first.inverse]
    return tensors


class CapturedStep:
    """The training step (:func:`~partgnn.train.step.forward_backward`) of padded items, replayed
    as one graph per shape (the module docstring).

    Args:
        model: The model (its parameters' ``.grad`` tensors are kept: the graphs accumulate into
            them, so the trainer zeroes them without setting them to ``None``).
        settings: The step's settings.
        counter: The run's communication counter (replays add what the captures recorded).
        max_graphs: Shapes captured at most.
        new_graph: Makes a :class:`StepGraph` (default: CUDA graphs sharing one pool).
    """

    def __init__(
        self,
        model: nn.Module,
        settings: StepSettings,
        *,
        counter: CommunicationCounter | None = None,
        max_graphs: int = MAX_GRAPHS,
        new_graph: Callable[[], StepGraph] | None = None,
    ) -> None:
        self.model = model
        self.settings = settings
        # Autocast's cache of cast weights would be freed after a capture: off inside one.
        self._capture_settings = replace(settings, autocast_cache=False)
        self.counter = counter
        self.max_graphs = max_graphs
        self._new_graph = new_graph or cuda_step_graphs()
        self._graphs: dict[PaddedShape, _Captured] = {}
        self._seen: set[PaddedShape] = set()
        #: Steps run as today (a shape's first, and shapes beyond ``max_graphs``), captures and
        #: replays.
        self.counts = {"eager": 0, "captured": 0, "replayed": 0}

    def __call__(self, item: TrainItem) -> torch.Tensor:
        """Forward, loss and backward of ``item`` (its gradients accumulate into ``.grad``).

        Returns:
            The loss, detached (of the padded item: the same as the item's).
        """
        padded = pad_item(item, self.settings.weights, self.settings.dtype)
        captured = self._graphs.get(padded.shape)
        if captured is None:
            if padded.shape not in self._seen or len(self._graphs) >= self.max_graphs:
                self._seen.add(padded.shape)
                self.counts["eager"] += 1
                return forward_backward(self.model, padded.item, self.settings)
            captured = self._capture(padded.item)
            self._graphs[padded.shape] = captured
        else:
            captured.load(padded.item)
        captured.graph.replay()
        self.counts["replayed"] += 1
        if self.counter is not None:
            for exchange in captured.exchanges:
                self.counter.record(*exchange)
        return captured.loss.clone()

    def tally(self) -> str:
        """One line: the steps replayed, the shapes captured, the steps run uncaptured."""
        counts = self.counts
        return (
            f"CUDA graphs: {counts['replayed']} step(s) replayed, {counts['captured']} shape(s) "
            f"captured, {counts['eager']} step(s) run uncaptured (a shape's first, or beyond "
            f"{self.max_graphs} shapes)"
        )

    def _capture(self, item: TrainItem) -> _Captured:
        """Records the step of ``item``, whose tensors become the graph's inputs."""
        for parameter in self.model.parameters():  # accumulated into, never allocated in the pool
            if parameter.requires_grad and parameter.grad is None:
                parameter.grad = torch.zeros_like(parameter)
        graph = self._new_graph()
        recorded = len(self.counter.history) if self.counter is not None else 0

        def step() -> torch.Tensor:
            loss = training_loss(self.model, item, self._capture_settings)
            loss.backward()
            return loss.detach()

        loss = graph.capture(step)
        exchanges: list[tuple[str, int, int]] = []
        if self.counter is not None:
            exchanges = self.counter.history[recorded:]
            _forget(self.counter, recorded)  # a capture moves nothing
        self.counts["captured"] += 1
        return _Captured(graph, item, loss, exchanges)


def _forget(counter: CommunicationCounter, keep: int) -> None:
    """Drops what ``counter`` recorded after its first ``keep`` exchanges."""
    history, blocked = counter.history[:keep], counter.blocked_seconds
    counter.reset()
    for exchange in history:
        counter.record(*exchange)
    counter.blocked_seconds = blocked
