"""The device a rank computes on and the ``torch.distributed`` backend that goes with it."""

from __future__ import annotations

import re

import torch
import torch.distributed as dist

from partgnn.errors import InputError


def resolve_device(device: str | torch.device, local_rank: int) -> torch.device:
    """The device a ``run.device`` spec names for the process of ``local_rank`` on its node.

    Raises:
        InputError: The spec is malformed, or names CUDA where there is none (or not that one).
    """
    spec = str(device).strip().lower()
    if spec == "auto":
        spec = "cuda" if torch.cuda.is_available() else "cpu"
    if spec == "cpu":
        return torch.device("cpu")
    if not re.fullmatch(r"cuda(:\d+)?", spec):
        raise InputError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N' (got {device!r})")
    if not torch.cuda.is_available():
        raise InputError(f"device {device!r} requested but CUDA is not available here")
    count = torch.cuda.device_count()
    if spec == "cuda":
        return torch.device("cuda", local_rank % count)
    index = int(spec.split(":")[1])
    if index >= count:
        raise InputError(f"device {device!r}: only {count} CUDA device(s) are visible")
    return torch.device("cuda", index)


def resolve_backend(backend: str | None, device: torch.device) -> str:
    if backend is None:
        return "nccl" if device.type == "cuda" else "gloo"
    backend = backend.strip().lower()
    if backend == "nccl":
        if device.type != "cuda":
            raise InputError(f"backend 'nccl' needs a CUDA device (device is {device})")
        if not dist.is_nccl_available():
            raise InputError("backend 'nccl' requested but this torch build has no NCCL")
    return backend
