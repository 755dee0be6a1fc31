"""The device a rank computes on and the ``torch.distributed`` backend that goes with it."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import torch
import torch.distributed as dist

from partgnn.errors import InputError

#: cuBLAS's workspace setting, which deterministic GEMMs need fixed.
CUBLAS_WORKSPACE = "CUBLAS_WORKSPACE_CONFIG"


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


#: The backends a rank may be asked for (``auto``: NCCL on a GPU of its own, else gloo).
BACKENDS = ("auto", "nccl", "gloo")


def ranks_sharing_a_gpu(
    device: str | torch.device, launcher: str, environ: Mapping[str, str], device_count: int
) -> int | None:
    """How many processes of this node share its GPUs under torchrun, when there are more of
    them than visible GPUs (``None``: as many or fewer, another launcher, or no GPU asked for).

    torchrun's processes all see the same GPUs, so with ``device`` ``auto`` or ``cuda`` the
    ``local_rank % device_count`` choice puts two ranks on one GPU, which NCCL refuses. Other
    launchers may show each task its own GPU (Slurm's ``--gpus-per-task``), so only NCCL can
    tell there (:func:`duplicate_gpu_message`).
    """
    spec = str(device).strip().lower()
    if launcher != "torchrun" or spec not in ("auto", "cuda") or device_count < 1:
        return None
    local = environ.get("LOCAL_WORLD_SIZE", "")
    if local.isdigit() and int(local) > device_count:
        return int(local)
    return None


def check_ranks_per_gpu(
    device: str | torch.device,
    launcher: str,
    environ: Mapping[str, str],
    device_count: int,
    backend: str | None = "nccl",
) -> None:
    """Refuses NCCL for a torchrun launch with more processes per node than visible GPUs.

    Gloo (``backend`` ``auto`` or ``gloo``) lets ranks share a GPU: each computes on it and
    exchanges through host memory (:func:`resolve_backend`).

    Raises:
        InputError: ``backend`` is ``nccl`` and ``LOCAL_WORLD_SIZE`` exceeds ``device_count``.
    """
    if backend != "nccl":
        return
    sharing = ranks_sharing_a_gpu(device, launcher, environ, device_count)
    if sharing is not None:
        raise InputError(
            f"{sharing} processes per node but {device_count} visible GPU(s): two ranks would "
            f"share a GPU, which NCCL refuses; launch --nproc-per-node {device_count}, or use "
            f"backend gloo (run.backend: gloo; ranks then share the GPU and exchange through "
            f"host memory), or --device cpu"
        )


def duplicate_gpu_message(error: BaseException, device: torch.device) -> str | None:
    """The one-line explanation of NCCL's "Duplicate GPU detected" (``None``: another error)."""
    if "duplicate gpu" not in str(error).lower():
        return None
    return (
        f"two ranks of one node use the same GPU ({device}): NCCL needs one GPU per rank; "
        f"launch at most as many processes per node as it has GPUs, give each task its own "
        f"GPU (e.g. srun --gpus-per-task=1), or use backend gloo (run.backend: gloo)"
    )


def resolve_backend(
    backend: str | None, device: torch.device, *, ranks_share_gpu: bool = False
) -> str:
    """The backend of a rank computing on ``device``.

    Args:
        backend: ``auto`` (or ``None``), ``nccl`` or ``gloo``.
        device: The rank's device.
        ranks_share_gpu: Several ranks of the node compute on one GPU (then ``auto`` is gloo:
            NCCL needs a GPU per rank).

    Returns:
        ``nccl`` or ``gloo``. Gloo on a CUDA device exchanges halo rows through host memory
        (:attr:`~partgnn.distributed.context.DistContext.host_staging`).

    Raises:
        InputError: An unknown backend, or NCCL without CUDA.
    """
    backend = "auto" if backend is None else str(backend).strip().lower()
    if backend not in BACKENDS:
        raise InputError(f"backend must be one of {', '.join(BACKENDS)} (got {backend!r})")
    if backend == "auto":
        return "nccl" if device.type == "cuda" and not ranks_share_gpu else "gloo"
    if backend == "nccl":
        if device.type != "cuda":
            raise InputError(f"backend 'nccl' needs a CUDA device (device is {device})")
        if not dist.is_nccl_available():
            raise InputError("backend 'nccl' requested but this torch build has no NCCL")
    return backend


@contextmanager
def deterministic_algorithms(device: torch.device, enabled: bool = True) -> Iterator[None]:
    """Only deterministic kernels within the block (``run.deterministic``); the process's
    setting (and ``CUBLAS_WORKSPACE_CONFIG``) is as it was afterwards.

    On GPUs cuBLAS needs a fixed workspace for that (``CUBLAS_WORKSPACE_CONFIG``, read when
    its handle is created: before the first matrix product); a user's setting stands.
    """
    if not enabled:
        yield
        return
    was_on = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    workspace = os.environ.get(CUBLAS_WORKSPACE)
    if device.type == "cuda":
        os.environ.setdefault(CUBLAS_WORKSPACE, ":4096:8")
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was_on, warn_only=warn_only)
        if workspace is None:
            os.environ.pop(CUBLAS_WORKSPACE, None)
