"""What a rank trains on: one event as a :class:`~partgnn.train.items.train_item.TrainItem`, from
the source of its mode, cached, padded and sampled.

What one rank trains on for one event, in each mode.

A source turns an event index into a :class:`TrainItem`: the rank's graph on its device, the
halo exchange (halo mode), which edges the rank counts in the loss and metrics, which edges cross
the partition boundary, and the loss normaliser:

- ``full`` / ``ddp``: the whole event graph (:class:`WholeGraphSource`); every edge counted;
  normaliser = the event's weighted edge count.
- ``halo``: the rank's shard (:class:`HaloSource`): local graph plus exchange; the rank counts
  the edges whose target it owns; normaliser = the *global* weighted edge count of the event,
  so that the ranks' losses add up to the full-graph loss.
- ``naive``: the rank's sector (:class:`NaiveSource`): owned nodes and interior edges; no
  exchange; normaliser = the sector's own weighted edge count (each sector is trained as an
  independent graph); the boundary edges the rank would count are lost.
- ``overlapping``: the rank's sector extended by the shards' margin of hops
  (:class:`OverlappingSource`), as ``naive`` otherwise; the edges into owned nodes from beyond
  the margin are lost.

Scoring (:mod:`partgnn.train.inference`) reads the same sources: ``item(index, edge_ids=True)``
adds the global ids of the item's edges, and a rank's scores are those of its counted edges.

Weighted edge count: the sum of the edges' loss weights
(:meth:`~partgnn.train.loss.EdgeWeights.normaliser`). When the weights depend on the particles'
pT (``loss.target_pt``), a shard-reading source counts each event's edges of each kind once, at
start: each rank its owned edges, summed over the graph group (every edge is owned by one rank).
"""
