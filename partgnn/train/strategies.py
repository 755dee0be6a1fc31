"""What differs between the training modes, one small class each; the trainer's loop is the same.

A strategy owns, for its mode: its facts (:class:`~partgnn.train.modes.ModeFacts`, which the
config checks, the world size, the memory plan, resume, scoring and the run's summary read), the
data source (what one rank computes on for one event, :mod:`partgnn.train.items`; training
and scoring read the same), how many events one optimizer step trains on and which of them this rank
computes, how gradients and losses combine across ranks, and which validation events this rank
evaluates. A new mode is one subclass with its ``facts``: defining it registers it.

===============  ================  ========  =====  ======  ===  ======  ==========================
mode             a rank holds      exchange  exact  groups  one  loss    gradients over the ranks
===============  ================  ========  =====  ======  ===  ======  ==========================
``full``         whole graph       no        yes    no      yes  event   (one process)
``ddp``          whole graph       no        no     no      no   event   averaged (an event each)
``halo``         shard             yes       yes    yes     no   event   summed over the group,
                                                                         averaged over its G groups
``naive``        sector            no        no     no      no   sector  averaged (a sector each)
``overlapping``  extended sector   no        no     no      no   sector  averaged (a sector each)
===============  ================  ========  =====  ======  ===  ======  ==========================

(groups: several graph groups may train different events of a step; one: one process only; loss:
what a rank's loss is normalised by.) Data-parallel replicas (ddp's ranks, halo's graph groups)
each train a different event of a step and evaluate every ``n_replicas``-th validation event.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from partgnn.distributed.communication_counter import CommunicationCounter
from partgnn.distributed.context import DistContext
from partgnn.distributed.gradients import (
    BucketedGradientReduce,
    GradientCombination,
    GradientReduce,
    GradientReduceAfterBackward,
    ReducedStep,
    all_reduce_value,
)
from partgnn.errors import InputError
from partgnn.metrics.run_summary import FORMER_MODE_NAMES
from partgnn.partition.shard_reader import ShardDirectory
from partgnn.train.config.sections import TrainConfig, input_features
from partgnn.train.items.shard_sources import HaloSource, NaiveSource, OverlappingSource
from partgnn.train.items.whole_graph_source import WholeGraphSource
from partgnn.train.modes import ModeFacts

EventSource = WholeGraphSource | HaloSource | NaiveSource | OverlappingSource

#: Every mode's strategy by its name, filled by defining the subclasses.
STRATEGIES: dict[str, type[Strategy]] = {}


@dataclass
class Strategy:
    """The mode-specific part of a run (subclasses: one per mode).

    Attributes:
        config: The run configuration.
        context: This process's ranks, groups and device.
        counter: Where halo exchanges count their bytes.
    """

    #: The mode's facts (a subclass without them is a base of others, not a mode).
    facts: ClassVar[ModeFacts]
    #: How the ranks' gradients and losses combine.
    combination: ClassVar[GradientCombination] = GradientCombination.MEAN

    config: TrainConfig
    context: DistContext
    counter: CommunicationCounter

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        facts = cls.__dict__.get("facts")
        if facts is None:
            return
        if facts.name in STRATEGIES or facts.name in FORMER_MODE_NAMES:
            raise TypeError(f"mode {facts.name!r} is defined twice ({cls.__qualname__})")
        STRATEGIES[facts.name] = cls

    @property
    def name(self) -> str:
        """The mode's name (``config.mode``)."""
        return self.facts.name

    @property
    def sector_margin(self) -> int:
        """Hops of the overlapping sectors the run trains on (0: none)."""
        return 0

    @property
    def trajectory_label(self) -> str:
        """What a checkpoint records of the mode among the settings a resumed run must keep:
        the exact modes compute one trajectory (:func:`trajectory_label`)."""
        return trajectory_label(self.facts)

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

    def gradient_reduce(
        self, parameters: list[nn.Parameter], *, during_backward: bool = True
    ) -> GradientReduce:
        """How this rank's gradients are combined with the others' at every step: bucket by
        bucket during the backward pass (``run.hide_communication``, unless not
        ``during_backward``: a replayed step runs no hook), else after it."""
        bucketed = self.config.run.hide_communication and during_backward
        if bucketed and self.context.global_world_size > 1:
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

    facts = ModeFacts(
        name="full", phrase="the full graph", holds="whole graph", exchanges=False, exact=True,
        one_process=True,
    )  # fmt: skip

    def make_source(self) -> EventSource:
        if self.context.global_world_size != 1:
            raise InputError(
                f"mode full runs on one process (the world size is "
                f"{self.context.global_world_size}); use mode ddp or halo"
            )
        return _whole_graphs(self.config, self.context)


class DdpStrategy(Strategy):
    """Whole event graphs, one per rank and step; gradients averaged over the ranks."""

    facts = ModeFacts(
        name="ddp", phrase="data parallelism", holds="whole graph", exchanges=False, exact=False
    )

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
        return ShardDirectory(self.config.data.shards, world_size=self.context.group_size)

    @property
    def counts_event_normaliser(self) -> bool:
        # Every rank of a group knows its event's count: the group's first rank adds it.
        return self.context.group_rank == 0

    @property
    def reduces_feature_statistics(self) -> bool:
        return self.context.group_size > 1


class HaloStrategy(_ShardStrategy):
    """Each event over the P ranks of a graph group, halo exchange at every step: exact.
    Several graph groups train different events of a step (data parallel)."""

    facts = ModeFacts(
        name="halo", phrase="halo exchange", holds="shard", exchanges=True, exact=True,
        graph_groups=True,
    )  # fmt: skip
    combination = GradientCombination.GRAPH_SUM

    def make_source(self) -> EventSource:
        run = self.config.run
        return HaloSource(
            self._shards(),
            self.context,
            self.config.loss.edge_weights(),
            transport=run.transport,
            counter=self.counter,
            hide_communication=run.hide_communication,
            interior_first=orders_interior_first(self.config),
            skip_unconnected=self.config.model.skips_unconnected_nodes,
            features=input_features(self.config),
        )

    @property
    def n_replicas(self) -> int:
        return self.context.n_graph_groups

    @property
    def replica_index(self) -> int:
        return self.context.global_rank // self.context.group_size


class NaiveStrategy(_ShardStrategy):
    """Each rank its own sector as an independent graph (cut edges lost); no exchange."""

    facts = ModeFacts(
        name="naive", phrase="naive sectorisation", holds="sector", exchanges=False, exact=False,
        loss_over="sector",
    )  # fmt: skip

    def make_source(self) -> EventSource:
        return NaiveSource(
            self._sector_shards(), self.context, self.config.loss.edge_weights(),
            skip_unconnected=self.config.model.skips_unconnected_nodes,
            features=input_features(self.config),
        )  # fmt: skip

    def _sector_shards(self) -> ShardDirectory:
        shards = self._shards()
        if self.context.n_graph_groups != 1:
            raise InputError(
                f"{self.config.data.shards}: mode {self.name} runs one sector per rank: shards "
                f"are for {shards.n_parts} ranks but the world size is "
                f"{self.context.global_world_size}"
            )
        return shards


class OverlappingStrategy(NaiveStrategy):
    """Each rank its sector extended by the shards' margin of hops (``partition --margin K``),
    as an independent graph: the edges into its owned nodes from beyond the margin are lost;
    no exchange."""

    facts = ModeFacts(
        name="overlapping", phrase="overlapping sectors", holds="extended sector",
        exchanges=False, exact=False, loss_over="sector",
    )  # fmt: skip

    @property
    def sector_margin(self) -> int:
        return ShardDirectory(self.config.data.shards).margin

    def make_source(self) -> EventSource:
        return OverlappingSource(
            self._sector_shards(), self.context, self.config.loss.edge_weights(),
            skip_unconnected=self.config.model.skips_unconnected_nodes,
            features=input_features(self.config),
        )  # fmt: skip


def strategy_class(mode: str, where: str = "config") -> type[Strategy]:
    """The strategy of the mode named ``mode`` (a name a run recorded before: its mode now).

    Raises:
        InputError: No such mode (one line naming the known ones).
    """
    strategy = STRATEGIES.get(FORMER_MODE_NAMES.get(mode, mode))
    if strategy is None:
        raise InputError(f"{where}: mode must be one of {', '.join(STRATEGIES)} (got {mode!r})")
    return strategy


def mode_facts(mode: str, where: str = "config") -> ModeFacts:
    """The facts of the mode named ``mode`` (:func:`strategy_class`)."""
    return strategy_class(mode, where).facts


def trained_mode(config: TrainConfig, *, say: bool = True) -> str:
    """The mode a run of ``config`` trains: its ``mode``, except that a config of mode
    ``naive`` on shards with a margin (how overlapping sectors were named before they were a
    mode of their own) trains ``overlapping``, said in one line (``say``).

    Raises:
        InputError: Unknown mode, or a naive config's shards cannot be read.
    """
    facts = mode_facts(config.mode)
    if facts.name == "naive":
        margin = ShardDirectory(config.data.shards).margin
        if margin > 0:
            if say:
                print(
                    f"partgnn: notice: mode naive on {config.data.shards} (sectors extended by "
                    f"{margin} hops) trains overlapping sectors: mode overlapping names it",
                    file=sys.stderr,
                )
            return OverlappingStrategy.facts.name
    return facts.name


def strategy_for(
    config: TrainConfig, context: DistContext, counter: CommunicationCounter
) -> Strategy:
    """The strategy of the mode ``config`` trains (:func:`trained_mode`)."""
    mode = trained_mode(config, say=context.is_main)
    return STRATEGIES[mode](config, context, counter)


def orders_interior_first(config: TrainConfig) -> bool:
    """Whether a run's items carry their edges' interior-first order: a mode that exchanges,
    hiding the exchange (``run.hide_communication``), with partgnn's model (the one that takes
    the order; a ``model.target`` of one's own is called as the model contract says)."""
    return (
        mode_facts(config.mode).exchanges
        and config.run.hide_communication
        and config.model.target is None
    )


def trajectory_label(facts: ModeFacts) -> str:
    """The mode as a checkpoint's trajectory records it: the exact modes (full, halo) are one,
    ``full graph``: a run moves between them on resume."""
    return "full graph" if facts.exact else facts.name


#: Trajectory labels checkpoints recorded before :func:`trajectory_label`, and theirs now.
RECORDED_TRAJECTORY_LABELS = {"full/halo": "full graph", **FORMER_MODE_NAMES}


def _whole_graphs(config: TrainConfig, context: DistContext) -> WholeGraphSource:
    return WholeGraphSource(
        config.data.graphs,
        context.device,
        config.loss.edge_weights(),
        config.data.boundary_shards,
        skip_unconnected=config.model.skips_unconnected_nodes,
        features=input_features(config),
    )
