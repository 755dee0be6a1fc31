"""Ships a trained model with the package: ``partgnn/pretrained/NAME.pt`` and its model card.

The checkpoint keeps what scoring needs (the weights, with the feature standardisation, the run
config and the score cut chosen on the validation events), with ``model.fused`` turned off (the
same weights; scoring then needs no C++ compiler). The card (``NAME.yaml``) records the config,
how the data were made, the seeds, the held-out figures of the evaluation JSON files given and
the score cut. Run after ``tools/bench_recipe.py``::

    .venv/bin/python tools/make_pretrained.py --name trackml-pt1 --run DIR/run \\
        --evaluation held-out=DIR/evaluation-test.json --summary "..." --data "..."

The real TrackML sample's figures (``partgnn pretrained NAME --evaluate EVENTS --work W``, the
sample imported by ``partgnn import-trackml``) go on the card beside the simulated ones, which
the suite checks::

    .venv/bin/python tools/make_pretrained.py --name trackml-full --add-to-card \
        --evaluation trackml-sample=W/evaluation.json \
        --evaluation trackml-sample-construction-limit=W/evaluation-limit.json
"""

from __future__ import annotations

import argparse
import datetime
import shlex
import shutil
import subprocess
from pathlib import Path

import torch
import yaml

from partgnn.data.files.h5_files import file_sha256
from partgnn.data.files.model_card import DEFAULT_TRACK_BUILDING, CardConstruction
from partgnn.data.files.storage import GraphFile
from partgnn.data.graphs.graph_construction import graph_construction
from partgnn.data.graphs.input_features import OWN_NODE_COLUMNS, InputFeatures
from partgnn.data.module_map.pretrained_maps import SHIPPED_MAP_SUFFIX
from partgnn.errors import InputError
from partgnn.export.export_model import recorded_input_features
from partgnn.export.node_inputs import NodeInputs
from partgnn.metrics.evaluation_results import EvaluationResults
from partgnn.resources import pretrained_dir
from partgnn.train.run_directory.saved_model import SavedModel


def without_machine_paths(config: dict) -> dict:
    """A run config as a shipped checkpoint records it: the training machine's paths cut to
    their names (the data files and folders, the run directory) and no ``run.init_from`` (the
    checkpoint a stage started from: the card's ``--training`` says how the stages went)."""
    config = {section: dict(v) if isinstance(v, dict) else v for section, v in config.items()}
    for key in ("graphs", "shards", "boundary_shards"):
        if config["data"].get(key):
            config["data"][key] = Path(config["data"][key]).name
    config["run"]["dir"] = Path(config["run"]["dir"]).name
    config["run"].pop("init_from", None)
    return config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", required=True, help="the model's name: pretrained:NAME")
    parser.add_argument("--run", type=Path, help="the training run's folder")
    parser.add_argument(
        "--evaluation", action="append", required=True, metavar="LABEL=JSON",
        help="an evaluate --out JSON of held-out events, with a label (repeatable)",
    )  # fmt: skip
    parser.add_argument("--summary", help="one line: what the model is for")
    parser.add_argument("--data", help="the commands that made the data")
    parser.add_argument("--training", default="", help="how it was trained (command, time)")
    parser.add_argument(
        "--simulation", default="", metavar="OPTIONS",
        help="the partgnn simulate options its events were made with (e.g. '--module-planes "
        "--field-profile --secondaries'): the card's simulation, with which the suite "
        "simulates the new event it scores",
    )  # fmt: skip
    parser.add_argument("--commit", default=None, help="the code that trained it (default: HEAD)")
    parser.add_argument(
        "--score-cut", type=float, default=None,
        help="the cut to ship (default: the one training chose on its validation events), e.g. "
        "one chosen by evaluate --cut-at-efficiency on separate validation events",
    )  # fmt: skip
    parser.add_argument(
        "--construction-from", type=Path, default=None, metavar="GRAPHS",
        help="a graphs file built the way the model expects (its training graphs' way): the "
        "construction is recorded, and scoring graphs built another way warns",
    )  # fmt: skip
    parser.add_argument(
        "--construction-how", default="", help="the commands that build such graphs (card)"
    )
    parser.add_argument(
        "--fit-module-map", default=None, metavar="ARGUMENTS",
        help="the fit-module-map arguments that made the map (without --out and --workers), "
        "for partgnn pretrained pretrained:NAME --make-map; the map they make must be the one "
        "--construction-from's graphs were built with",
    )  # fmt: skip
    parser.add_argument(
        "--ship-map", type=Path, default=None, metavar="MAP",
        help="the module map --construction-from's graphs were built with, shipped beside the "
        "model as NAME.map.npz (build-graphs --map pretrained:NAME then needs no fit)",
    )  # fmt: skip
    parser.add_argument(
        "--checkpoint", type=Path, default=None,
        help="the run's checkpoint to ship (default: RUN/checkpoints/last.pt)",
    )  # fmt: skip
    parser.add_argument(
        "--add-to-card", action="store_true",
        help="only add the --evaluation entries to NAME's shipped card (the checkpoint and "
        "the rest of the card unchanged): e.g. the real sample's figures",
    )  # fmt: skip
    args = parser.parse_args()
    if args.add_to_card:
        add_to_card(args.name, args.evaluation)
        return
    missing = [f"--{k}" for k in ("run", "summary", "data") if getattr(args, k) is None]
    if missing:
        parser.error(f"{', '.join(missing)} needed (unless --add-to-card)")
    saved = SavedModel.read(args.checkpoint or args.run / "checkpoints" / "last.pt")
    config = without_machine_paths(saved.config)
    config["model"]["fused"] = False
    score_cut = saved.score_cut if args.score_cut is None else args.score_cut
    kept = {"model": saved.weights, "config": config, "score_cut": score_cut}
    features = recorded_input_features(saved)
    construction = None
    if args.construction_from is not None:
        with GraphFile(args.construction_from) as graphs:
            construction = graph_construction(graphs.attrs)
        if construction["method"] == "geometric":
            construction.pop("module_map_sha256")
        elif construction["module_map_sha256"] is None:
            parser.error(f"{args.construction_from} records no module map checksum: rebuild it")
        elif args.fit_module_map is None:
            parser.error("a module-map construction needs --fit-module-map (how to make the map)")
        else:
            construction["fit_module_map"] = shlex.split(args.fit_module_map)
        kept["construction"] = construction
        if args.ship_map is not None:
            if file_sha256(args.ship_map) != construction.get("module_map_sha256"):
                parser.error(f"--ship-map {args.ship_map}: not the map the graphs were built with")
            shipped = pretrained_dir() / f"{args.name}{SHIPPED_MAP_SUFFIX}"
            shutil.copyfile(args.ship_map, shipped)
            construction["module_map_file"] = shipped.name
            construction["module_map_bytes"] = shipped.stat().st_size
    target = pretrained_dir() / f"{args.name}.pt"
    target.parent.mkdir(parents=True, exist_ok=True)
    torch.save(kept, target)
    card = {
        "name": args.name,
        "summary": args.summary,
        "use": f"partgnn infer --checkpoint pretrained:{args.name} --graphs GRAPHS --out SCORES",
        "model": config["model"],
        "inputs": features.as_config(),
        "training": {
            "config": {k: config[k] for k in ("mode", "loss", "optim") if k in config},
            "run": {
                k: config["run"][k]
                for k in ("seed", "dtype", "bf16")
                if config["run"].get(k) is not None
            },
            "steps": saved.step,
            "how": args.training,
            "commit": args.commit or _commit(),
            "date": datetime.date.today().isoformat(),
        },
        "data": args.data,
        **({"simulation": shlex.split(args.simulation)} if args.simulation else {}),
        **(
            {"construction": _card_construction(construction, args, parser)} if construction else {}
        ),
        "score_cut": kept["score_cut"],
        "track_building": _track_building(args.evaluation),
        "export": export_entry(args.name, features),
        "held_out": {},
    }
    _add_evaluations(card, args.evaluation)
    card_path = target.with_suffix(".yaml")
    card_path.write_text(yaml.safe_dump(card, sort_keys=False, width=100))
    print(f"{target} ({target.stat().st_size / 1e6:.1f} MB) and {card_path}")


def _card_construction(construction: dict, args, parser) -> dict:
    """The card's ``construction``: the checkpoint's, with how to build such graphs, written
    by its record (the fit's arguments checked as the card's reader will)."""
    try:
        card = CardConstruction.of_yaml(
            {**construction, "how": args.construction_how}, "--construction-from"
        )
    except InputError as error:
        parser.error(str(error))
    return card.as_yaml()


def export_entry(name: str, features: InputFeatures) -> dict[str, str]:
    """The card's ``export``: how to export the model for ACTS, and what it is given (partgnn's
    own node columns and the model's kept fields, each at the model's scale)."""
    kept = {c.name: c.scale for c in features.node if c.name not in OWN_NODE_COLUMNS}
    inputs = NodeInputs.parse(None, None, kept=kept)
    acts = ", ".join(
        name or column for name, column in zip(inputs.acts_names, inputs.columns, strict=True)
    )
    scales = ", ".join(f"{s:.10g}" for s in inputs.scales)
    return {
        "how": f"partgnn export pretrained:{name} --format torchscript|aoti|onnx --out FILE",
        "node_features": f"(N, {len(inputs.columns)}) float32: {inputs.describe()} (ACTS: "
        f"nodeFeatures [{acts}], featureScales [{scales}])",
        "edge_index": "(2, E) int64, inner hit first (ACTS: undirected off)",
        "output": "logits (E,); score = sigmoid(logit), kept above score_cut",
    }


def _track_building(evaluations: list[str]) -> str:
    """The one track building the ``LABEL=JSON`` evaluations were made with (a card's figures
    are all measured one way: ``partgnn pretrained --evaluate`` builds tracks that way)."""
    methods = {_read(item)[1].track_building or DEFAULT_TRACK_BUILDING for item in evaluations}
    if len(methods) != 1:
        raise SystemExit(
            f"--evaluation: tracks built by {' and '.join(sorted(methods))}; evaluate them all "
            "with one --track-building"
        )
    return methods.pop()


def _read(item: str) -> tuple[str, EvaluationResults]:
    label, _, path = item.partition("=")
    return label, EvaluationResults.read(path)


def _add_evaluations(card: dict, evaluations: list[str]) -> None:
    """Puts each ``LABEL=JSON`` evaluation's figures into ``card["held_out"][LABEL]``.

    Raises:
        SystemExit: An evaluation's tracks were built another way than the card's.
    """
    method = card.get("track_building", DEFAULT_TRACK_BUILDING)
    for item in evaluations:
        label, metrics = _read(item)
        if (built := metrics.track_building or DEFAULT_TRACK_BUILDING) != method:
            raise SystemExit(
                f"--evaluation {label}: tracks built by {built}, the card's "
                f"by {method} (partgnn evaluate --track-building {method})"
            )
        card["held_out"][label] = metrics.held_out_figures().as_yaml()


def add_to_card(name: str, evaluations: list[str]) -> None:
    """Adds (or replaces) held-out entries of a shipped model's card; nothing else changes.

    E.g. the real sample's figures from ``partgnn pretrained NAME --evaluate EVENTS --work W``:
    ``trackml-sample=W/evaluation.json trackml-sample-construction-limit=W/evaluation-limit.json``.
    """
    card_path = pretrained_dir() / f"{name}.yaml"
    card = yaml.safe_load(card_path.read_text())
    _add_evaluations(card, evaluations)
    card_path.write_text(yaml.safe_dump(card, sort_keys=False, width=100))
    print(f"{card_path}: held_out {', '.join(e.partition('=')[0] for e in evaluations)}")


def _commit() -> str:
    result = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=Path(__file__).parent)  # fmt: skip
    return result.stdout.strip() or "unknown"


if __name__ == "__main__":
    main()
