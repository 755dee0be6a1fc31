"""``partgnn export``: a trained model as a file ACTS's GNN plugin loads (TorchScript,
AOTInductor or ONNX), with the plugin's calling convention (:mod:`partgnn.export`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from partgnn.cli.output_guard import add_overwrite_option
from partgnn.data.files import output_kinds

#: The formats (:data:`partgnn.export.formats.FORMATS`; tests/cli checks they agree).
FORMATS: tuple[str, ...] = ("torchscript", "aoti", "onnx")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``export`` to the ``partgnn`` parser."""
    export = subparsers.add_parser(
        "export", help="write a trained model for ACTS's GNN plugin (TorchScript, AOTI, ONNX)"
    )
    export.add_argument("checkpoint", help="a training checkpoint or pretrained:NAME")
    export.add_argument("--format", choices=FORMATS, required=True, dest="fmt")
    export.add_argument("--out", type=Path, required=True, help="the file to write")
    export.add_argument(
        "--node-features", default=None, metavar="COLUMNS",
        help="the node features' columns, comma-separated, of r, phi, z, eta, x, y (ACTS's "
        "nodeFeatures; default r,phi,z,eta; without eta it is computed from r and z; with x,y,z "
        "r and phi are computed as partgnn's graphs are: the graph files' own features)",
    )  # fmt: skip
    export.add_argument(
        "--feature-scales", default=None, metavar="SCALES",
        help="what each column was divided by, comma-separated (ACTS's featureScales; default "
        "partgnn's: 1000 for lengths (r, z, x, y [mm]), pi for phi, 1 for eta)",
    )  # fmt: skip
    export.add_argument(
        "--device", default="cpu", choices=("cpu", "cuda"),
        help="where the model runs: an AOTInductor package is compiled for it (TorchScript "
        "and ONNX files run on either)",
    )  # fmt: skip
    add_overwrite_option(export, output_kinds.EXPORTED_MODEL)
    export.set_defaults(run=run_export)


def run_export(args: argparse.Namespace) -> int:
    from partgnn.export.export_model import export_checkpoint, kept_node_inputs
    from partgnn.export.node_inputs import NodeInputs
    from partgnn.resources import pretrained_name
    from partgnn.train.run_directory.saved_model import SavedModel

    saved = SavedModel.read(args.checkpoint)
    kept = kept_node_inputs(saved)
    inputs = NodeInputs.parse(args.node_features, args.feature_scales, kept=kept)
    exported = export_checkpoint(
        args.checkpoint, args.fmt, args.out, inputs=inputs, device=args.device, saved=saved
    )
    where = "the model card's cut" if pretrained_name(args.checkpoint) else "training's cut"
    cut = (
        "no cut recorded (the checkpoint's run chose none)"
        if exported.score_cut is None
        else f"{where}: {exported.score_cut:.9g}"
    )
    print(
        f"{exported.model} -> {exported.path} ({exported.format}, "
        f"{exported.path.stat().st_size / 1e6:.1f} MB)\n"
        f"  inputs: node_features (N, {len(inputs.columns)}) float32: {inputs.describe()}; "
        "edge_index (2, E) int64, inner hit first (ACTS: undirected off)\n"
        f"  output: logits (E,); score = sigmoid(logit); {cut}"
    )
    return 0
