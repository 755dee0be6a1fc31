"""What a training mode is: the facts each mode's strategy declares once, and everything else
reads (config checks, the world size, the memory plan, resume, scoring, the run's summary).

The built-in modes and their facts: the table of :mod:`partgnn.train.strategies` (checked against
the facts by the tests). A new mode is one :class:`~partgnn.train.strategies.Strategy` subclass
with its facts: it is registered by being defined.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

#: What one rank computes on for one event.
Holds = Literal["whole graph", "shard", "sector", "extended sector"]


@dataclass(frozen=True)
class ModeFacts:
    """The facts of one training mode, declared by its strategy
    (:class:`partgnn.train.strategies.Strategy` ``facts``).

    Attributes:
        name: The mode as a config names it (``mode: halo``).
        phrase: The mode in a sentence, e.g. ``"halo exchange"``.
        holds: What one rank computes on for one event: the whole graph, its shard (owned nodes
            plus halo), its sector (owned nodes, interior edges) or its sector extended by the
            shards' margin of hops.
        exchanges: Whether the model exchanges halo rows with the group's other ranks at
            every message-passing step.
        exact: Whether a run computes the full-graph trajectory (one event per step, every
            edge with its whole neighbourhood): such runs resume one another.
        graph_groups: Whether several graph groups of P ranks may run side by side, each on
            its own event of a step (data parallel over groups).
        one_process: Whether the mode runs on one process only.
        loss_over: What a rank's loss is normalised by: the whole ``event``'s weighted edge
            count (the ranks' losses add up to the event's) or its ``sector``'s own (each
            sector is trained as an independent graph).
    """

    name: str
    phrase: str
    holds: Holds
    exchanges: bool
    exact: bool
    graph_groups: bool = False
    one_process: bool = False
    loss_over: Literal["event", "sector"] = "event"

    @property
    def reads_shards(self) -> bool:
        """Whether the mode reads a shard directory (``data.shards``), else a graphs file
        (``data.graphs``)."""
        return self.holds != "whole graph"

    @property
    def loses_cut_edges(self) -> bool:
        """Whether a rank trains on a sector without the edges that cross its boundary (all
        of them, or those beyond the margin): the runs the comparison measures against an
        exact one."""
        return self.holds in ("sector", "extended sector")

    def as_record(self) -> dict[str, Any]:
        """The facts as a run's summary records them (plain JSON values)."""
        record = dataclasses.asdict(self)
        record.update(reads_shards=self.reads_shards, loses_cut_edges=self.loses_cut_edges)
        return record
