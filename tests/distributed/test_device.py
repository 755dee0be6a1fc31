"""Device and backend choice, and the refusal of two ranks on one GPU (issue 25, item 2)."""

from __future__ import annotations

import pytest
import torch

from partgnn.distributed.device import (
    check_ranks_per_gpu,
    duplicate_gpu_message,
    ranks_sharing_a_gpu,
    resolve_backend,
    resolve_device,
)
from partgnn.errors import InputError
from tests.conftest import CUDA_AVAILABLE


def test_nccl_for_more_torchrun_processes_than_gpus_is_refused_in_one_line():
    with pytest.raises(InputError, match=r"^4 processes per node but 2 visible GPU\(s\).*"
                       r"--nproc-per-node 2.*run.backend: gloo"):  # fmt: skip
        check_ranks_per_gpu(
            "auto", "torchrun", {"LOCAL_WORLD_SIZE": "4"}, device_count=2, backend="nccl"
        )


def test_ranks_sharing_a_gpu_get_gloo_unless_nccl_is_asked_for():
    environ = {"LOCAL_WORLD_SIZE": "3"}
    assert ranks_sharing_a_gpu("auto", "torchrun", environ, device_count=1) == 3
    assert ranks_sharing_a_gpu("cuda", "torchrun", environ, device_count=4) is None
    assert ranks_sharing_a_gpu("cuda:0", "torchrun", environ, device_count=1) is None
    assert ranks_sharing_a_gpu("auto", "slurm", environ, device_count=1) is None
    for backend in ("auto", "gloo", None):
        check_ranks_per_gpu("auto", "torchrun", environ, device_count=1, backend=backend)
    cuda = torch.device("cuda", 0)
    assert resolve_backend("auto", cuda, ranks_share_gpu=True) == "gloo"
    assert resolve_backend(None, cuda, ranks_share_gpu=True) == "gloo"
    assert resolve_backend("gloo", cuda) == "gloo"
    with pytest.raises(InputError, match=r"^backend must be one of auto, nccl, gloo \(got 'mpi'\)"):
        resolve_backend("mpi", cuda)


@pytest.mark.parametrize(
    ("device", "launcher", "local_world_size"),
    [
        ("cuda", "torchrun", "2"),  # one GPU each
        ("cpu", "torchrun", "8"),  # no GPU used
        ("cuda:0", "torchrun", "4"),  # the user chose the GPU
        ("auto", "slurm", "4"),  # --gpus-per-task may show each task its own GPU
        ("auto", "mpi", "4"),
    ],
)
def test_launches_that_may_be_right_are_left_to_nccl(device, launcher, local_world_size):
    check_ranks_per_gpu(
        device, launcher, {"LOCAL_WORLD_SIZE": local_world_size}, device_count=2, backend="nccl"
    )


def test_nccls_duplicate_gpu_error_is_explained():
    error = RuntimeError("NCCL error: invalid usage ... Duplicate GPU detected : rank 1 and rank 0")
    message = duplicate_gpu_message(error, torch.device("cuda", 0))
    assert message is not None and "\n" not in message
    assert "same GPU (cuda:0)" in message and "--gpus-per-task=1" in message
    assert duplicate_gpu_message(RuntimeError("connection refused"), torch.device("cuda")) is None


def test_cpu_device_and_backend():
    assert resolve_device("cpu", local_rank=3) == torch.device("cpu")
    assert resolve_backend(None, torch.device("cpu")) == "gloo"
    with pytest.raises(InputError, match="needs a CUDA device"):
        resolve_backend("nccl", torch.device("cpu"))
    with pytest.raises(InputError, match="device must be"):
        resolve_device("tpu", local_rank=0)


@pytest.mark.skipif(CUDA_AVAILABLE, reason="checks the refusal where there is no GPU")
def test_cuda_requested_without_a_gpu_is_one_line():
    with pytest.raises(InputError, match="CUDA is not available here"):
        resolve_device("cuda", local_rank=0)


def test_deterministic_algorithms_hold_within_the_block_only():
    import os

    import torch

    from partgnn.distributed.device import CUBLAS_WORKSPACE, deterministic_algorithms

    assert not torch.are_deterministic_algorithms_enabled()
    had_workspace = CUBLAS_WORKSPACE in os.environ
    with deterministic_algorithms(torch.device("cpu")):
        assert torch.are_deterministic_algorithms_enabled()
    assert not torch.are_deterministic_algorithms_enabled()
    assert (CUBLAS_WORKSPACE in os.environ) == had_workspace
    with deterministic_algorithms(torch.device("cpu"), enabled=False):
        assert not torch.are_deterministic_algorithms_enabled()
