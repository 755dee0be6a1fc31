"""Writing an :class:`~partgnn.export.edge_classifier.ExportedEdgeClassifier` in the formats ACTS's
GNN plugin loads: TorchScript (``TorchEdgeClassifier``, ``torch::jit::load``), an AOTInductor
package (``torch._inductor`` compiles it to a shared library with the machine's C++ compiler),
and ONNX (``OnnxEdgeClassifier``, onnxruntime). Each takes ``(node_features (N, F) float32,
edge_index (2, E) int64)`` and gives logits ``(E,)``; the number of nodes and edges is free.

Each file also carries what a user needs to call it (:func:`calling_convention`): the node
features' columns and scales, the score cut of the model card and the model's name, as
TorchScript extra file ``partgnn.json``, ONNX metadata ``partgnn`` and the package's
``partgnn.json`` beside AOTInductor's files. Files are written atomically.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import torch

from partgnn.data.files.output_files import atomic_output
from partgnn.errors import InputError
from partgnn.export.aoti_checks import AotiInputChecks
from partgnn.export.edge_classifier import ExportedEdgeClassifier
from partgnn.export.torchscript_file import save_scripted

#: The formats ``partgnn export`` writes.
FORMATS: tuple[str, ...] = ("torchscript", "aoti", "onnx")
#: The name of the calling convention beside the model in each file.
CONVENTION_NAME = "partgnn.json"
#: Warnings of torch's exporters that a user can do nothing about (regexes).
QUIET_EXPORT_WARNINGS: tuple[str, ...] = (
    r"`torch\.jit\.(save|script)` is deprecated",
    r".*LeafSpec.* is deprecated",
)
#: ONNX opset of the exported graph (``ScatterElements`` with ``max`` needs 18).
ONNX_OPSET = 18


def calling_convention(module: ExportedEdgeClassifier, info: dict[str, Any]) -> dict[str, Any]:
    """What a caller needs: the inputs' names, shapes and meaning, the output, and ``info``
    (the model's name, score cut, node features' columns and scales)."""
    return {
        "inputs": {
            "node_features": f"(N, {module.n_columns}) float32: {info['node_features']}",
            "edge_index": "(2, E) int64, inner hit first (ACTS: undirected off)",
        },
        "output": "logits (E,) float32; score = sigmoid(logit), an edge is kept above the cut",
        **info,
    }


def write_exported(
    module: ExportedEdgeClassifier,
    example: tuple[torch.Tensor, torch.Tensor],
    fmt: str,
    out: str | os.PathLike[str],
    info: dict[str, Any],
) -> None:
    """Writes ``module`` as ``fmt`` to ``out`` (atomically), with its calling convention.

    Args:
        module: The model to write, on the device it is to run on (AOTInductor compiles for it).
        example: Inputs of the right dtypes on that device (their sizes are not fixed).
        fmt: One of :data:`FORMATS`.
        out: The file.
        info: The calling convention's entries (:func:`calling_convention`).

    Raises:
        InputError: An unknown format, or the format's tools are missing (one line saying what
            to install).
    """
    if fmt not in FORMATS:
        raise InputError(f"export format {fmt!r}: choose one of {', '.join(FORMATS)}")
    convention = json.dumps(calling_convention(module, info), indent=1, sort_keys=True)
    module = module.eval()
    with torch.no_grad(), warnings.catch_warnings(), atomic_output(out) as tmp:
        # torch >= 2.10 deprecates TorchScript, which ACTS's TorchEdgeClassifier loads; and
        # torch.export warns about its own internals
        for message in QUIET_EXPORT_WARNINGS:
            warnings.filterwarnings("ignore", message=message)
        if fmt == "torchscript":
            save_scripted(module, tmp, {CONVENTION_NAME: convention})
        elif fmt == "aoti":
            _write_aoti(module, example, tmp, convention)
        else:
            _write_onnx(module, example, tmp, convention)


def _dynamic_shapes() -> dict[str, dict[int, Any]]:
    nodes, edges = torch.export.Dim("nodes", min=2), torch.export.Dim("edges", min=2)
    return {"node_features": {0: nodes}, "edge_index": {1: edges}}


def _write_aoti(
    module: ExportedEdgeClassifier,
    example: tuple[torch.Tensor, torch.Tensor],
    tmp: Path,
    convention: str,
) -> None:
    from torch._inductor import aoti_compile_and_package

    exported = torch.export.export(module, example, dynamic_shapes=_dynamic_shapes())
    # (inductor wants a .pt2 suffix: the package is made beside the temporary file, then
    # moved onto it)
    package = Path(str(tmp) + ".pt2")
    checks = AotiInputChecks(module)
    try:
        with checks.compiled_in():
            aoti_compile_and_package(exported, package_path=str(package))
        _add_to_zip(package, CONVENTION_NAME, convention)
        os.replace(package, tmp)
    except Exception as err:  # the compiler's failure, said in one line
        raise InputError(
            f"aoti: AOTInductor could not compile the model (it needs a C++ compiler, g++ or "
            f"clang, on this machine): {_first_line(err)}"
        ) from None
    finally:
        package.unlink(missing_ok=True)
    if not checks.injected:
        print(
            f"partgnn: warning: aoti: this torch's AOTInductor ({torch.__version__}) did not take "
            "partgnn's input checks: the file does not refuse inputs of other shapes or dtypes",
            file=sys.stderr,
        )


def _add_to_zip(package: Path, name: str, text: str) -> None:
    import zipfile

    with zipfile.ZipFile(package, "a") as archive:
        root = archive.namelist()[0].split("/", 1)[0]
        archive.writestr(f"{root}/extra/{name}", text)


def _write_onnx(
    module: ExportedEdgeClassifier,
    example: tuple[torch.Tensor, torch.Tensor],
    tmp: Path,
    convention: str,
) -> None:
    try:
        import onnx
        import onnxruntime  # noqa: F401 - the file is run once before it is said written
        import onnxscript  # noqa: F401 - torch.onnx's exporter needs it
    except ImportError as err:
        raise InputError(
            f"onnx: {err.name} is not installed (pip install 'partgnn[export]')"
        ) from None
    if module.by_xy:
        raise InputError(
            "onnx: phi from x and y needs atan2 in float64, which onnxruntime does not have: "
            "give r, phi and z for an ONNX file (or write TorchScript or AOTInductor)"
        )
    module = copy.deepcopy(module)
    module.sums_by_prefix = True  # (onnxruntime's scatter-add is slow: see the attribute)
    module.eta_by_log = True  # (onnxruntime has no float64 Asinh: see the attribute)
    # (its registry logs a warning per torchvision operator it cannot register: not ours)
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        program = torch.onnx.export(
            module, example, input_names=["node_features", "edge_index"],
            output_names=["logits"], dynamic_shapes=_dynamic_shapes(), opset_version=ONNX_OPSET,
            dynamo=True, verbose=False,
        )  # fmt: skip
    except Exception as err:  # the exporter's failure, said in one line
        raise InputError(
            f"onnx: torch.onnx could not convert the model: {_first_line(err)}"
        ) from None
    finally:
        logger.setLevel(level)
    model = program.model_proto
    entry = model.metadata_props.add()
    entry.key, entry.value = "partgnn", convention
    onnx.save(model, str(tmp))
    _check_onnx_runs(tmp, module, example)


def _check_onnx_runs(
    path: Path, module: ExportedEdgeClassifier, example: tuple[torch.Tensor, torch.Tensor]
) -> None:
    """Loads the written file in onnxruntime and scores ``example`` with it, as the module does.

    Raises:
        InputError: onnxruntime cannot load or run it, or it scores otherwise (one line).
    """
    import onnxruntime  # (its absence is refused before the export: _write_onnx)

    node_features, edge_index = (tensor.cpu() for tensor in example)
    try:
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feed = {"node_features": node_features.numpy(), "edge_index": edge_index.numpy()}
        logits = torch.from_numpy(session.run(None, feed)[0])
    except Exception as err:  # onnxruntime's refusal, in one line
        raise InputError(
            f"onnx: the written file does not run in onnxruntime: {_first_line(err)}"
        ) from None
    expected = module.cpu()(node_features, edge_index)
    if not torch.allclose(logits, expected, rtol=1e-3, atol=1e-3):
        difference = (logits - expected).abs().max().item()
        raise InputError(
            f"onnx: the written file scores otherwise than the model in onnxruntime (logits "
            f"differ by up to {difference:.3g}): not written"
        )


def _first_line(err: BaseException) -> str:
    """The first line of an exporter's error, without terminal colours, at most 200 chars."""

    text = re.sub(r"\x1b\[[0-9;]*m", "", str(err)).strip()
    return (text.splitlines() or [type(err).__name__])[0][:200]
