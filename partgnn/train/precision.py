"""Whether a run computes in bf16: ``run.bf16`` true, false, or ``auto`` (where it is native).

bf16 pays only where the hardware computes it: CUDA GPUs of compute capability 8.0 and newer,
and CPUs with AVX512-BF16 or AMX (this project's development machine: a training step in bf16
autocast takes 0.6-0.8 of float32's time there). A CPU without them (AVX2 only) emulates bf16
matrix products in float32 with conversions: a 1024 x 1024 product took 4.8 s against 0.035 s
in float32 when torch dispatched as on an AVX2 CPU (``ATEN_CPU_CAPABILITY=avx2``, 2026-11-28;
docs/history/library.md). ``auto`` chooses bf16 where it is native and float32 elsewhere; an
explicit ``true`` on a CPU without native bf16 is kept and said in one line.
"""

from __future__ import annotations

import torch

#: The values of ``run.bf16``.
AUTO = "auto"


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` computes bf16 matrix products natively: a CUDA GPU of compute
    capability >= 8.0, or a CPU whose torch kernels dispatch to AVX-512 with AVX512-BF16 or AMX
    (``ATEN_CPU_CAPABILITY`` lowers the dispatch and is respected)."""
    if device.type == "cuda":
        return torch.cuda.get_device_capability(device)[0] >= 8
    if device.type == "cpu":
        dispatched = torch.backends.cpu.get_cpu_capability()
        return dispatched.startswith("AVX512") and (
            torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
        )
    return False


def resolve_bf16(setting: bool | str, device: torch.device) -> bool:
    """``run.bf16`` on ``device``: ``auto`` is :func:`native_bf16`."""
    return native_bf16(device) if setting == AUTO else bool(setting)


def bf16_notice(setting: bool | str, device: torch.device) -> str | None:
    """One line when ``run.bf16: true`` asks for bf16 where it is emulated (slower than
    float32), else ``None``."""
    if setting is not True or device.type != "cpu" or native_bf16(device):
        return None
    return (
        f"run.bf16 is true on a CPU without native bf16 (torch dispatches "
        f"{torch.backends.cpu.get_cpu_capability()}): bf16 products are emulated there, many "
        "times slower than float32; run.bf16: auto computes in float32 on such a CPU"
    )
