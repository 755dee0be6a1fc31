"""``partgnn export``'s work: a checkpoint (or ``pretrained:NAME``) to an exported file."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from partgnn.data.graphs.input_features import InputFeatures
from partgnn.errors import InputError
from partgnn.export.edge_classifier import ExportedEdgeClassifier
from partgnn.export.formats import write_exported
from partgnn.export.node_inputs import NodeInputs
from partgnn.resources import pretrained_name
from partgnn.train.inference import load_trained_model
from partgnn.train.run_directory.saved_model import SavedModel


@dataclass(frozen=True)
class Exported:
    """What :func:`export_checkpoint` wrote."""

    path: Path
    format: str
    model: str
    score_cut: float | None
    inputs: NodeInputs


def export_checkpoint(
    checkpoint: str | os.PathLike[str],
    fmt: str,
    out: str | os.PathLike[str],
    *,
    inputs: NodeInputs | None = None,
    device: str = "cpu",
    saved: SavedModel | None = None,
) -> Exported:
    """Writes ``checkpoint``'s model as ``fmt`` (:data:`~partgnn.export.formats.FORMATS`) to
    ``out``, taking node features ``inputs`` (default: partgnn's own columns and scales).

    Args:
        checkpoint: A training checkpoint or ``pretrained:NAME``.
        fmt: ``torchscript``, ``aoti`` or ``onnx``.
        out: The file to write (atomically).
        inputs: The node features' columns and scales.
        device: Where the model is to run: ``cpu`` or ``cuda`` (an AOTInductor package is
            compiled for it; TorchScript and ONNX files run on either).
        saved: The checkpoint when the caller has read it already (else it is read).

    Raises:
        InputError: The checkpoint holds a model class of one's own (``model.target``) or a
            BatchNorm model, the device is not there, an AOTInductor package's name does not
            end in ``.pt2``, or the format's tools are missing.
    """
    inputs = inputs or NodeInputs()
    if fmt == "aoti" and Path(out).suffix != ".pt2":
        raise InputError(
            f"{out}: an AOTInductor package is a .pt2 file (its loaders read the name): "
            "name it NAME.pt2"
        )
    if device not in ("cpu", "cuda"):
        raise InputError(f"--device {device!r}: cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: no CUDA device on this machine")
    saved = SavedModel.read(checkpoint) if saved is None else saved
    target = saved.model_config().target
    if target is not None:
        raise InputError(
            f"{checkpoint}: model.target {target} is a model class of one's own; partgnn "
            "exports its own Interaction Network only (export that class with torch.jit.script "
            "or torch.export yourself)"
        )
    features = recorded_input_features(saved)
    model, _ = load_trained_model(checkpoint, *features.widths, torch.device("cpu"), saved=saved)
    try:
        module = ExportedEdgeClassifier(model, inputs, features).to(device)
    except InputError as err:
        raise InputError(f"{checkpoint}: {err}") from None
    name = pretrained_name(str(checkpoint)) or Path(checkpoint).stem
    info = {
        "model": name,
        "score_cut": saved.score_cut,
        "node_features": inputs.describe(),
        "node_feature_columns": list(inputs.columns),
        "feature_scales": list(inputs.scales),
        "acts_node_features": [name or "(not computed by ACTS)" for name in inputs.acts_names],
    }
    write_exported(module, example_inputs(inputs, device), fmt, out, info)
    return Exported(Path(out), fmt, name, info["score_cut"], inputs)


def recorded_input_features(saved: SavedModel) -> InputFeatures:
    """The input columns a checkpoint's model was trained on (its config's lists)."""
    recorded = saved.input_columns()
    return InputFeatures.parse(
        recorded["node_features"], recorded["edge_features"], where=saved.where
    )


def kept_node_inputs(saved: SavedModel) -> dict[str, float]:
    """A checkpoint's (``saved``) model's node inputs that are fields of its graphs files, with
    the scales it divides them by (what ``partgnn export`` takes beside partgnn's own
    columns)."""
    from partgnn.data.graphs.input_features import OWN_NODE_COLUMNS

    features = recorded_input_features(saved)
    return {c.name: c.scale for c in features.node if c.name not in OWN_NODE_COLUMNS}


def with_kept_fields(
    own: torch.Tensor, extra: Mapping[str, np.ndarray], kept: Mapping[str, float]
) -> np.ndarray:
    """An exported file's node features for one graph: ``own`` ``(N, C)`` float32 (the
    positions ``--node-features`` names, e.g. the graph's ``x``), then each ``kept`` field of
    the graph's file (:func:`kept_node_inputs`; ``extra``: :meth:`GraphFile.extra
    <partgnn.data.files.storage.GraphFile.extra>`) divided by its scale: ``(N, C + len(kept))``
    float32."""
    columns = [
        torch.from_numpy(extra[name] / scale).float()[:, None] for name, scale in kept.items()
    ]
    return torch.cat([own, *columns], dim=1).numpy()


def example_inputs(inputs: NodeInputs, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """A small graph in ``inputs``' columns (8 hits on a track-like line, 7 edges): what the
    exporters trace with; sizes are left free in the exported file."""
    r = torch.linspace(30.0, 1000.0, 8, dtype=torch.float64)
    phi = 0.1 + r / 5e4
    physical = {
        "r": r, "phi": phi, "z": 0.4 * r, "eta": torch.asinh(0.4 * r / r),
        "x": r * torch.cos(phi), "y": r * torch.sin(phi),
    }  # fmt: skip
    columns = [  # (a field of the graphs files: a value of the radius' size)
        physical.get(name, r) / scale
        for name, scale in zip(inputs.columns, inputs.scales, strict=True)
    ]
    node_features = torch.stack(columns, dim=1).to(torch.float32)
    edge_index = torch.stack([torch.arange(7), torch.arange(1, 8)])
    return node_features.to(device), edge_index.to(device)
