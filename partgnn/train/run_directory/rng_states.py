"""Every rank's random-number generator states, gathered into checkpoints and restored on resume.

The built-in model draws no random numbers after its initialisation and the event order is
seeded by ``(run.seed, epoch)``; a model of one's own with dropout draws on every step, and
resumes exactly only with the generators where they were. Each rank's CPU generator (and its
GPU's, on CUDA) is gathered at every checkpoint; a run resumed on as many ranks restores each
rank's own. At another world size (elastic resume) the states cannot be matched to the ranks:
they are left as seeded, and the resumed run is exact only for a model that draws none.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from partgnn.distributed.context import DistContext


def gather_rng_states(context: DistContext) -> list[dict[str, torch.Tensor | None]]:
    """Every rank's generator states, by global rank (a collective over the whole job)."""
    state = {"cpu": torch.get_rng_state(), "cuda": None}
    if context.device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(context.device)
    if context.global_world_size == 1:
        return [state]
    states: list[dict[str, torch.Tensor | None] | None] = [None] * context.global_world_size
    dist.all_gather_object(states, state)
    return states  # type: ignore[return-value]


def restore_rng_states(states: list[dict] | None, context: DistContext) -> bool:
    """Restores this rank's generator states from ``states`` (as :func:`gather_rng_states`
    made them).

    Returns:
        Whether they were restored (``False``: none saved, or saved at another world size).
    """
    if not states or len(states) != context.global_world_size:
        return False
    state = states[context.global_rank]
    torch.set_rng_state(state["cpu"])
    if context.device.type == "cuda" and state.get("cuda") is not None:
        torch.cuda.set_rng_state(state["cuda"], context.device)
    return True
