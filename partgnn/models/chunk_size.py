"""How many edges a recomputed edge MLP computes at once: from the memory a chunk may take.

A recomputed edge MLP (:mod:`~partgnn.models.chunked_edge_mlp`) runs its edges in chunks, so
that at most one chunk's activations exist at once. Each chunk costs the same number of kernel
launches whatever its size (about 60 per chunk and pass for a 2-layer MLP): on a GPU, where the
host issues every launch, many small chunks make a step bound by the launches, not the
arithmetic (issue 49: 16 chunks per MLP were 83 % of a 1e6-edge step's operations). So the
chunk size is chosen from memory, on every device: the largest chunk whose activations fit the
memory a chunk may take (:attr:`ComputePolicy.chunk_bytes
<partgnn.models.compute_policy.ComputePolicy.chunk_bytes>`, ``model.chunk_mb``), one chunk per
MLP whenever the whole MLP fits. Without a setting:

- on a GPU a chunk may take :data:`GPU_CHUNK_SHARE` of the device's memory (an H100's 80 GB:
  one chunk per MLP up to ~3e6 edges at width 64);
- on a CPU, where every byte is resident memory a rank's peak RSS counts, the edges run in
  :data:`EDGE_CHUNKS` chunks of at least :data:`MIN_CHUNK_EDGES` (so a chunk's activations are
  a sixteenth of the event's: the memory plan's measured footprints assume it).
"""

from __future__ import annotations

from functools import cache

import torch

#: Without a chunk memory on a CPU, a recomputed edge MLP runs over this many chunks...
EDGE_CHUNKS = 16
#: ...of at least this many edges (small graphs run in one chunk per part).
MIN_CHUNK_EDGES = 4096
#: Bytes a chunk's recomputation holds per edge, in values of the MLP's width: the gathered
#: node terms, each layer's output before and after its LayerNorm and activation, and their
#: gradients (counted from the layers of a 2-layer MLP, rounded up; a whole recomputed MLP
#: measured 6.6 rows of ``E x H`` above the rest of the step, docs/history/gpu.md).
CHUNK_VALUES_PER_EDGE = 12
#: Without a chunk memory on a GPU, a chunk may take this share of the device's memory.
GPU_CHUNK_SHARE = 0.25


def chunk_edges(
    n_edges: int, width: int, element_bytes: int, chunk_bytes: int | None, device: torch.device
) -> int:
    """The most edges one chunk of an edge MLP computes.

    Args:
        n_edges: Edges of the part being chunked (at least 1 is returned).
        width: The MLP's hidden width ``H``.
        element_bytes: Bytes of one activation value (4 for float32).
        chunk_bytes: The memory one chunk may take (``None``: the device's default, see the
            module docstring).
        device: Where the MLP runs.

    Returns:
        Edges per chunk; ``>= n_edges`` means one chunk.
    """
    if chunk_bytes is None:
        if device.type != "cuda":
            return max(MIN_CHUNK_EDGES, -(-n_edges // EDGE_CHUNKS))
        chunk_bytes = int(GPU_CHUNK_SHARE * device_memory(device))
    per_edge = CHUNK_VALUES_PER_EDGE * width * element_bytes
    return max(1, chunk_bytes // per_edge)


def chunk_count(n_edges: int, edges_per_chunk: int) -> int:
    """Chunks of ``edges_per_chunk`` that ``n_edges`` edges take (0 for none)."""
    return -(-n_edges // edges_per_chunk)


@cache
def _total_memory(index: int) -> int:
    return torch.cuda.get_device_properties(index).total_memory


def device_memory(device: torch.device) -> int:
    """Total memory of a GPU in bytes (asked once per device; no synchronisation)."""
    return _total_memory(device.index if device.index is not None else torch.cuda.current_device())
