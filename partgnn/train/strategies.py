"""What differs between the training modes, one small class each; the trainer's loop is the same.

A strategy owns, for its mode: the data source (what one rank trains on for one event,
:mod:`partgnn.train.events`), how many events one optimizer step trains on and which of them
this rank computes, how gradients and losses combine across ranks, and which validation events
this rank evaluates.

============  ===================  ==================  =================================
mode          source               events per step     gradients over the ranks
============  ===================  ==================  =================================
``full``      whole graphs         1                   (one process)
``ddp``       whole graphs         world size          averaged (each rank its own event)
``halo``      shard + exchange     graph groups G      summed over the group, averaged
                                                       over the G groups
``naive``     independent sector   1                   averaged (each rank its sector)
============  ===================  ==================  =================================

Data-parallel replicas (ddp's ranks, halo's graph groups) each train a different event of a
step and evaluate every ``n_replicas``-th validation event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from partgnn.distributed.context import DistContext
from partgnn.distributed.gradients import (
    BucketedGradientReduce,
    GradientCombination,
    GradientReduce,
    GradientReduceAfterBackward,
    ReducedStep,
    all_reduce_value,
)
from partgnn.distributed.halo_exchange import CommunicationCounter
from partgnn.errors import InputError
from partgnn.partition.shard_reader import ShardDirectory
from partgnn.train.config import TrainConfig
from partgnn.train.events import HaloSource, NaiveSource, WholeGraphSource

EventSource = WholeGraphSource | HaloSource | NaiveSource


@dataclass
class Strategy:
    """The mode-specific part of a run (subclasses: one per mode).

    Attributes:
        config: The run configuration.
        context: This process's ranks, groups and device.
        counter: Where halo exchanges count their bytes.
    """

    mode: ClassVar[str]
    #: How the ranks' gradients and losses combine.
    combination: ClassVar[GradientCombination] = GradientCombination.MEAN

    config: TrainConfig
    context: DistContext
    counter: CommunicationCounter

    @property
    def name(self) -> str:
        """What the run compares as (``overlap`` for naive sectors with a margin)."""
        return self.mode

    @property
    def sector_margin(self) -> int:
        """Hops of the overlapping sectors the run trains on (0: none)."""
        return 0

    @property
    def data_path(self) -> str:
        """The file or folder the events come from (for messages)."""
        return str(self.config.data.graphs)

    def make_source(self) -> EventSource:
        """The data source of this rank.

        Raises:
            InputError: The data do not fit the launched processes.
        """
        raise NotImplementedError

    @property
    def n_replicas(self) -> int:
        """Data-parallel replicas: events one optimizer step trains on."""
        return 1

    @property
    def replica_index(self) -> int:
        """Which of a step's events this rank computes, in ``[0, n_replicas)``."""
        return 0

    def event_of_rank(self, indices: list[int]) -> int | None:
        """The event of a step's ``indices`` this rank trains on (``None``: its replica has
        none in this step, the last of an epoch)."""
        slot = self.replica_index
        return indices[slot] if slot < len(indices) else None

    def replicas_in_step(self, indices: list[int]) -> int | None:
        """Over how many replicas a step with these events averages (``None``: all of them,
        in the modes with one event per step)."""
        return len(indices) if self.n_replicas > 1 else None

    def validation_events(self, indices: list[int]) -> list[int]:
        """The validation events this rank evaluates (each replica every
        ``n_replicas``-th)."""
        return indices[self.replica_index :: self.n_replicas]

    @property
    def counts_event_normaliser(self) -> bool:
        """Whether this rank adds its events' weighted edge counts to the validation loss's
        denominator (once per event across the ranks)."""
        return True

    @property
    def reduces_feature_statistics(self) -> bool:
        """Whether the standardisation's statistics are summed over the graph-parallel
        group (each rank sees part of every event)."""
        return False

    def gradient_reduce(self, parameters: list[nn.Parameter]) -> GradientReduce:
        """How this rank's gradients are combined with the others' at every step: bucket by
        bucket during the backward pass (``run.overlap``), else after it."""
        if self.config.run.overlap and self.context.global_world_size > 1:
            return BucketedGradientReduce(parameters, self.context, combination=self.combination)
        return GradientReduceAfterBackward(parameters, self.context, self.combination)

    def reduce_loss(
        self,
        loss: torch.Tensor,
        replicas: int | None,
        stop_signal: int = 0,
        non_finite: torch.Tensor | None = None,
    ) -> ReducedStep:
        """A step's loss as the run reports it: the event's loss (summed over its group in
        halo mode), averaged over the step's events (``replicas``; else over all ranks); the
        stop signal any rank received (0: none) and the ranks whose loss or gradients were not
        finite (``non_finite``: this rank's ``[loss, gradient]`` flags), agreed in the same
        all-reduce."""
        return all_reduce_value(
            loss,
            self.context,
            combination=self.combination,
            replicas=replicas,
            flag=stop_signal,
            non_finite=non_finite,
        )


class FullStrategy(Strategy):
    """One process, whole event graphs, one event per step."""

    mode = "full"

    def make_source(self) -> EventSource:
        if self.context.global_world_size != 1:
            raise InputError(
                f"mode full runs on one process (the world size is "
                f"{self.context.global_world_size}); use mode ddp or halo"
            )
        return _whole_graphs(self.config, self.context)


class DdpStrategy(Strategy):
    """Whole event graphs, one per rank and step; gradients averaged over the ranks."""

    mode = "ddp"

    def make_source(self) -> EventSource:
        return _whole_graphs(self.config, self.context)

    @property
    def n_replicas(self) -> int:
        return self.context.global_world_size

    @property
    def replica_index(self) -> int:
        return self.context.global_rank


class _ShardStrategy(Strategy):
    """The modes that read a rank's shard."""

    @property
    def data_path(self) -> str:
        return str(self.config.data.shards)

    def _shards(self) -> ShardDirectory:
        return ShardDirectory(self.config.data.shards, world_size=self.context.world_size)

    @property
    def counts_event_normaliser(self) -> bool:
        # Every rank of a group knows its event's count: the group's first rank adds it.
        return self.context.rank == 0

    @property
    def reduces_feature_statistics(self) -> bool:
        return self.context.world_size > 1


class HaloStrategy(_ShardStrategy):
    """Each event over the P ranks of a graph group, halo exchange at every step: exact.
    Several graph groups train different events of a step (data parallel)."""

    mode = "halo"
    combination = GradientCombination.GRAPH_SUM

    def make_source(self) -> EventSource:
        run = self.config.run
        return HaloSource(
            self._shards(),
            self.context,
            self.config.loss.edge_weights(),
            transport=run.transport,
            counter=self.counter,
            overlap=run.overlap,
            skip_unconnected=self.config.model.skips_unconnected_nodes,
        )

    @property
    def n_replicas(self) -> int:
        return self.context.n_graph_groups

    @property
    def replica_index(self) -> int:
        return self.context.global_rank // self.context.world_size


class NaiveStrategy(_ShardStrategy):
    """Each rank its own sector as an independent graph (cut edges lost), or its sector
    extended by a margin of hops (overlapping sectors); no exchange."""

    mode = "naive"
    #: The shards' margin, read by :meth:`make_source`.
    _margin = 0

    @property
    def name(self) -> str:
        return "overlap" if self._margin > 0 else self.mode

    @property
    def sector_margin(self) -> int:
        return self._margin

    def make_source(self) -> EventSource:
        shards = self._shards()
        if self.context.n_graph_groups != 1:
            raise InputError(
                f"{self.config.data.shards}: naive mode runs one sector per rank: shards are "
                f"for {shards.n_parts} ranks but the world size is "
                f"{self.context.global_world_size}"
            )
        self._margin = int(shards.meta.get("margin", 0))
        return NaiveSource(
            shards, self.context, self.config.loss.edge_weights(),
            skip_unconnected=self.config.model.skips_unconnected_nodes,
        )  # fmt: skip


STRATEGIES: dict[str, type[Strategy]] = {
    cls.mode: cls for cls in (FullStrategy, HaloStrategy, NaiveStrategy, DdpStrategy)
}


def strategy_for(
    config: TrainConfig, context: DistContext, counter: CommunicationCounter
) -> Strategy:
    """The strategy of ``config.mode``."""
    return STRATEGIES[config.mode](config, context, counter)


def _whole_graphs(config: TrainConfig, context: DistContext) -> WholeGraphSource:
    return WholeGraphSource(
        config.data.graphs,
        context.device,
        config.loss.edge_weights(),
        config.data.boundary_shards,
        skip_unconnected=config.model.skips_unconnected_nodes,
    )
