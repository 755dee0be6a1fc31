"""The project's C++ CPU kernels (``model.fused``), compiled once per machine and loaded.

``kernels/norm_activation.cpp`` (LayerNorm and activation in one pass per row,
:mod:`~partgnn.models.fused_norm_activation`) and ``kernels/node_sums.cpp`` (edge rows summed
into their nodes, :mod:`~partgnn.models.node_sums`) are one extension, registered as
``torch.ops.partgnn.*``. It is compiled the first time it is used (with the compiler torch's C++
extensions use, about 15-25 s) and cached (``TORCH_EXTENSIONS_DIR``, by default
``~/.cache/torch_extensions``) under a name with the hash of the sources, the flags and the torch
build; a run with ``model.fused: false`` never builds it.
"""

from __future__ import annotations

import hashlib
import os
import time
from functools import cache
from pathlib import Path

import torch

from partgnn.errors import InputError, first_line

SOURCES = tuple(
    Path(__file__).parent / "kernels" / name for name in ("norm_activation.cpp", "node_sums.cpp")
)
# Instruction-set flags for ATen's vector types, by torch's CPU capability.
_CAPABILITY_FLAGS = {
    "AVX512": ["-DCPU_CAPABILITY_AVX512", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq",
               "-mfma"],
    "AVX2": ["-DCPU_CAPABILITY_AVX2", "-mavx2", "-mfma", "-mf16c"],
}  # fmt: skip


class KernelBuild:
    """How the kernels were obtained in this process: ``seconds`` to compile or load them."""

    seconds: float | None = None


@cache
def load_kernels() -> None:
    """Compiles (first time on this machine) or loads the kernels into ``torch.ops.partgnn``.

    Raises:
        InputError: They cannot be built (no C++ compiler, ...): one line that says to set
            ``model.fused: false``.
    """
    from torch.utils import cpp_extension

    flags = ["-O3", "-fopenmp"]
    capability = torch.backends.cpu.get_cpu_capability()
    if capability in _CAPABILITY_FLAGS:
        flags += [*_CAPABILITY_FLAGS[capability], f"-DCPU_CAPABILITY={capability}"]
    started = time.perf_counter()
    try:
        # The sources, flags and torch build in the name: each version of the kernels and each
        # torch build (whose headers the build reads) builds once in its own folder, which
        # every environment with that build loads (ninja alone compares file times, which a
        # copy or an install can leave misleading).
        sources = {path.name: path.read_bytes() for path in SOURCES}
        build_inputs = [*flags, torch.__version__, torch.version.git_version,
                        f"cxx11_abi={torch._C._GLIBCXX_USE_CXX11_ABI}"]  # fmt: skip
        digest = hashlib.sha256(b"".join(sources.values()) + " ".join(build_inputs).encode())
        name = f"partgnn_kernels_{capability.lower()}_{digest.hexdigest()[:12]}"
        folder = Path(cpp_extension._get_build_directory(name, False))
        if not _load_built(folder, name):
            cpp_extension.load(
                name=name,
                sources=[str(_cached_source(folder, file, text)) for file, text in sources.items()],
                extra_cflags=flags,
                extra_ldflags=["-fopenmp"],
                is_python_module=False,
                verbose=bool(os.environ.get("PARTGNN_VERBOSE_BUILD")),
            )
    except (OSError, RuntimeError, ImportError) as err:
        raise InputError(
            f"model.fused: cannot build the fused CPU kernels ({first_line(err)}); install a "
            "C++ compiler or set model.fused: false"
        ) from None
    KernelBuild.seconds = time.perf_counter() - started


def _load_built(folder: Path, name: str) -> bool:
    """Loads the library a finished build left in ``folder``; ``False`` where there is none
    (or a build holds the folder's lock, or it does not load): then ``cpp_extension.load``
    builds or waits. Not through ninja: its build file names the include folders of the
    environment that wrote it, and another environment's would build everything again."""
    library = folder / f"{name}.so"
    if not library.is_file() or (folder / "lock").exists():
        return False
    try:
        torch.ops.load_library(str(library))
    except OSError:
        return False
    return True


def _cached_source(build_directory: Path, file: str, source: bytes) -> Path:
    """A kernel's source, copied once into the build folder: ninja's build rule names the
    source's path, so every checkout or environment that builds from there reuses one build."""
    path = build_directory / file
    if not path.exists():
        partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        partial.write_bytes(source)
        os.replace(partial, path)
    return path
