"""``partgnn configs``: list the shipped run-config templates, or print one to start from;
``partgnn config from-acorn``: a run config translated from acorn's GNN stage configuration."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from partgnn.cli.output_guard import add_overwrite_option
from partgnn.data.files import output_kinds
from partgnn.resources import config_names, configs_dir, resolve_config

if TYPE_CHECKING:
    from partgnn.data.graphs.input_features import InputFeatures


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``configs`` to the ``partgnn`` parser."""
    configs = subparsers.add_parser(
        "configs",
        help="list the shipped run configs, or print one (partgnn configs halo > my.yaml)",
        description=(
            "Run configs ship with partgnn and are named by `partgnn train --config NAME`. "
            "Without NAME, lists them with the first line of each; with NAME, prints its YAML."
        ),
    )
    configs.add_argument("name", nargs="?", help="a shipped config's name, e.g. halo")
    configs.set_defaults(run=run_configs)

    config = subparsers.add_parser(
        "config",
        help="make a run config (from-acorn: translate acorn's GNN stage configuration)",
        description="Makes a run config from another tool's configuration.",
    )
    actions = config.add_subparsers(dest="action", required=True, metavar="ACTION")
    from_acorn = actions.add_parser(
        "from-acorn",
        help="translate acorn's gnn_train.yaml into a partgnn run config",
        description=(
            "Translates acorn's GNN stage configuration (GNN4ITkTeam/CommonFramework: model "
            "InteractionGNN or InteractionGNN2, hidden, n_graph_iters, the MLPs' layers, "
            "layernorm / batchnorm, activations, node_features with node_scales, "
            "edge_features, weighting, lr and its StepLR schedule, ...) into a partgnn run "
            "config, and says on stderr, one line per key, what it does not honour and why "
            "(the same lines head the written file). A key acorn's GNN stage does not have is "
            "refused. Train it with `partgnn train --config CONFIG.yaml`."
        ),
    )
    from_acorn.add_argument("acorn_config", type=Path, help="acorn's gnn_train.yaml")
    from_acorn.add_argument("--out", required=True, type=Path, help="the run config to write")
    add_overwrite_option(from_acorn, output_kinds.RUN_CONFIG)
    from_acorn.add_argument(
        "--graphs", type=Path, default=None,
        help="the graphs file to train on (partgnn import-acorn's): data.graphs, and its "
        "fields are checked against the config's inputs",
    )  # fmt: skip
    from_acorn.add_argument(
        "--shards", type=Path, default=None,
        help="the shards of that file (partgnn partition's): data.shards and mode halo",
    )  # fmt: skip
    from_acorn.add_argument(
        "--pt-unit", choices=("MeV", "GeV"), default="MeV",
        help="unit of pT in the weighting conditions (ITk: MeV, the default; TrackML: GeV)",
    )  # fmt: skip
    from_acorn.set_defaults(run=run_from_acorn)


def run_configs(args: argparse.Namespace) -> int:
    if args.name is not None:
        print(resolve_config(args.name).read_text(), end="")
        return 0
    for name in config_names():
        print(f"{name:<12} {_first_sentence(configs_dir() / f'{name}.yaml')}")
    return 0


def run_from_acorn(args: argparse.Namespace) -> int:
    import sys

    import yaml

    from partgnn.data.files.output_files import atomic_output, check_output_path
    from partgnn.data.files.output_kinds import WRITTEN_BY_PARTGNN
    from partgnn.errors import InputError
    from partgnn.train.config.acorn_config import translate_acorn_config
    from partgnn.train.config.config_file import validate_config
    from partgnn.train.config.sections import build_config, input_features
    from partgnn.yaml_files import read_yaml_file

    if args.graphs is None and args.shards is None:
        raise InputError(
            "config from-acorn: --graphs GRAPHS.h5 (partgnn import-acorn's) or --shards DIR "
            "(partgnn partition's): the data the config trains on"
        )
    check_output_path(args.out)
    where = str(args.acorn_config)
    acorn = read_yaml_file(args.acorn_config, where=where)
    translation = translate_acorn_config(
        acorn, where=where, pt_unit=args.pt_unit,
        graphs=None if args.graphs is None else str(args.graphs),
    )  # fmt: skip
    raw = translation.config
    if args.shards is not None:
        raw["mode"] = "halo"
        raw["data"]["shards"] = str(args.shards)
    # what train will read: checked before anything is written
    config = build_config(raw, where)
    validate_config(config, where)
    if args.graphs is not None:
        _check_inputs_in(input_features(config, where), args.graphs)
    header = [
        f"# {WRITTEN_BY_PARTGNN} config from-acorn {args.acorn_config.name}: acorn's GNN stage",
        "# configuration as a partgnn run config. Not honoured, one line per key:",
        *(f"#   {note}" for note in translation.notes),
    ]
    with atomic_output(args.out) as tmp:
        tmp.write_text("\n".join(header) + "\n" + yaml.safe_dump(raw, sort_keys=False))
    for note in translation.notes:
        print(f"partgnn: config from-acorn: {note}", file=sys.stderr)
    print(f"{args.out}: written (partgnn train --config {args.out})")
    return 0


def _check_inputs_in(features: InputFeatures, graphs: Path) -> None:
    """Refuses inputs the graphs file's first event lacks (one line naming the field)."""
    from partgnn.data.files.storage import GraphFile

    with GraphFile(graphs) as file:
        if len(file):
            features.select(file[0], file.extra(0), where=f"{graphs} (event 0)")


def _first_sentence(path) -> str:
    """The first sentence of the comment block a config file starts with."""
    words: list[str] = []
    for line in path.read_text().splitlines():
        text = line.lstrip("#").strip()
        if not line.startswith("#") or not text:
            break
        words.append(text)
    paragraph = " ".join(words)
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[: end + 1]
