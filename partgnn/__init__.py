"""partgnn: graph-parallel training of GNNs on particle-physics event graphs.

Each event graph is split into partitions; each rank holds one partition plus its halo, and
boundary embeddings are exchanged at every message-passing step, so training is exactly the
full-graph computation. See ``README.md`` and ``docs/``.
"""

__version__ = "0.1.0"
