"""How the Interaction Network computes, apart from what it computes: one policy object.

The same function is computed whatever the policy (up to float rounding); the policy trades
memory for time (:attr:`ComputePolicy.recompute`), uses the CPU kernels
(:attr:`ComputePolicy.fused`), gives freed heap back (:attr:`ComputePolicy.heap_release`) and
sizes the chunks of edges (:attr:`ComputePolicy.chunk_bytes`).
A checkpoint resumes and scores under any policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from partgnn.memory.heap_release import DEFAULT_HEAP_RELEASE, HeapReleasePolicy


@dataclass(frozen=True)
class ComputePolicy:
    """How a model's forward and backward passes are computed.

    Attributes:
        recompute: Activation recomputation (``model.recompute``): keep only the latents of
            every ``STEPS_PER_REGION``-th step for the backward pass and recompute the rest
            there (regions of steps; edge MLPs in chunks of edges, also when scoring; the edge
            encoder inside the first edge update): about half a row of ``H`` per edge per step.
            Halo exchanges are not repeated (the recomputation replays the rows received,
            :mod:`partgnn.models.replayed_exchange`). Without it, LayerNorm and activations are
            still recomputed (about four rows of ``H`` per edge per step; faster on small
            graphs).
        fused: Each MLP's LayerNorm and activation (and an edge update's residual) in one pass
            per row (:mod:`~partgnn.models.fused_norm_activation`: a C++ kernel on CPUs,
            compiled by ``torch.compile`` on GPUs), and edge rows summed into their nodes node
            by node (:mod:`~partgnn.models.node_sums`).
        heap_release: After which recomputed edge MLPs the freed C-heap pages go back to the
            system (default: event-sized ones; :mod:`~partgnn.memory.heap_release`).
        chunk_bytes: The memory one chunk of a recomputed edge MLP may take (``model.chunk_mb``):
            the largest chunk that fits, one per MLP when the whole MLP does; ``None``: the
            device's default (:mod:`~partgnn.models.chunk_size`).
    """

    recompute: bool = False
    fused: bool = False
    heap_release: HeapReleasePolicy = field(default=DEFAULT_HEAP_RELEASE)
    chunk_bytes: int | None = None


#: The default: no recomputation, no fused kernels, heap given back after event-sized work.
DEFAULT_COMPUTE = ComputePolicy()
