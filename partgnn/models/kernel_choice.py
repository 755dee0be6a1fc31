"""Which fused kernels rows take (``model.fused``): the C++ CPU kernels on a CPU, the compiled
ones (:mod:`~partgnn.models.compiled_norm_activation`) on other devices.

:func:`gpu_kernel_paths` makes CPU tensors take the paths a GPU's take (compiled LayerNorm and
activation, edge sums without the node-by-node kernel): to count on a CPU the operations a GPU
would launch (``tools/bench_launch_budget.py``) and to test the compiled kernels without a GPU.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


class _Paths:
    gpu_on_cpu = False


@contextmanager
def gpu_kernel_paths() -> Iterator[None]:
    """Inside it, CPU tensors take the fused kernels' GPU paths (not thread-safe: one setting
    for the process while it lasts)."""
    before, _Paths.gpu_on_cpu = _Paths.gpu_on_cpu, True
    try:
        yield
    finally:
        _Paths.gpu_on_cpu = before


def cpp_kernels_on(device: torch.device) -> bool:
    """Whether tensors on ``device`` take the C++ CPU kernels (else the compiled ones)."""
    return device.type == "cpu" and not _Paths.gpu_on_cpu
