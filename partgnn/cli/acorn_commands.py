"""``import-acorn`` and ``export-acorn``: acorn event files (GNN4ITk CommonFramework) in and out."""

from __future__ import annotations

import argparse
from pathlib import Path

from partgnn.cli.arg_types import non_negative_float
from partgnn.cli.eval_commands import SCORE_CUT, TRACK_BUILDING
from partgnn.cli.output_guard import add_overwrite_option
from partgnn.data.files import output_kinds

#: What export-acorn writes per event beside the scores.
TRACK_CHOICES = ("none", *TRACK_BUILDING)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``import-acorn`` and ``export-acorn`` to the ``partgnn`` parser."""
    importer = subparsers.add_parser(
        "import-acorn",
        help="read acorn event files (.pyg) into a graphs file",
        description=(
            "Reads the acorn event files (event<id>.pyg or event<id>-graph.pyg, any depth, "
            "e.g. trainset/ valset/ testset/) under DIRECTORY into one graphs file: the "
            "graph, its truth (edge truth, each hit's particle and pT from the track edges) "
            "and every other per-hit, per-edge and per-track field, kept as it came. Both "
            "acorn namings are read (hit_*/edge_*/track_* fields, or the older y, truth_map, "
            "pt...). Files are unpickled with an allow-list of PyG's Data classes: a file "
            "that would run code is refused."
        ),
    )
    importer.add_argument("directory", type=Path, help="folder of acorn event files")
    importer.add_argument("--out", required=True, type=Path, help="output graphs file (.h5)")
    add_overwrite_option(importer, output_kinds.GRAPHS)
    importer.add_argument(
        "--pt-unit", choices=("MeV", "GeV"), default="MeV",
        help="unit of the files' pT (ITk files: MeV, the default; TrackML-based: GeV)",
    )  # fmt: skip
    importer.set_defaults(run=run_import_acorn)

    exporter = subparsers.add_parser(
        "export-acorn",
        help="write graphs (with scores, track labels) as acorn event files",
        description=(
            "Writes acorn event files. For graphs import-acorn read: for every event of "
            "SCORES, its acorn event file again (read from where import-acorn found it) with "
            "the edge scores added (edge_scores, or scores in the older naming), in the file's "
            "own edge order, and with --tracks the track labels of each hit (hit_track_labels, "
            "or labels) and edge (edge_track_labels: the track of an edge whose two hits share "
            "one, else -1); the folder layout under the imported directory is kept. For any "
            "other graphs file (built here): every event (or every event of SCORES) as "
            "eventID.pyg in acorn's unprefixed naming, the one its CTD 2023 configurations "
            "read: hit_id, r, phi, z, eta and every per-hit field the file keeps "
            "(cluster_r_1...), edge_index, y and the kept per-edge fields, the true edges as "
            "track_edges with truth_map, particle_id, pt and nhits; scores and labels as "
            "above. import-acorn reads them back."
        ),
    )
    exporter.add_argument(
        "scores", type=Path, nargs="?", default=None,
        help="scores file from infer (optional for graphs built here)",
    )  # fmt: skip
    exporter.add_argument(
        "--graphs", required=True, type=Path, help="the graphs file import-acorn wrote"
    )
    exporter.add_argument("--out", required=True, type=Path, help="output folder")
    exporter.add_argument(
        "--tracks", choices=TRACK_CHOICES, default="none",
        help="also write track labels built this way (default: none)",
    )  # fmt: skip
    exporter.add_argument(
        "--cut", type=non_negative_float, default=None,
        help=f"edge score cut for --tracks (default: the one infer recorded, else {SCORE_CUT})",
    )  # fmt: skip
    exporter.add_argument(
        "--pt-unit", choices=("MeV", "GeV"), default="MeV",
        help="unit of the written pT, for graphs built here (default MeV, as ITk's files and "
        "import-acorn's default)",
    )  # fmt: skip
    exporter.set_defaults(run=run_export_acorn, output_folder=True)


def run_import_acorn(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from partgnn.data.files.output_files import check_output_path
    from partgnn.data.files.writers import write_graphs
    from partgnn.data.formats.acorn import acorn_to_graph, find_acorn_files, load_acorn_file
    from partgnn.data.graphs.graph_config import EDGE_FEATURES, NODE_FEATURES
    from partgnn.errors import InputError, first_line

    check_output_path(args.out)
    files = find_acorn_files(args.directory)
    root = args.directory.resolve()
    counts = {"nodes": 0, "edges": 0, "true": 0, "missing": 0, "tracks": 0}

    def graphs():
        for path in tqdm(files, desc="import-acorn", unit="event"):
            fields = load_acorn_file(path)
            try:
                graph, kept, quality = acorn_to_graph(fields, path=path, pt_unit=args.pt_unit)
            except (TypeError, ValueError, RuntimeError, IndexError) as err:
                # A field of a type or shape no check foresaw: still one line naming the file.
                raise InputError(
                    f"{path}: not a readable acorn event ({type(err).__name__}: {first_line(err)})"
                ) from None
            # (relative to the folder as given: a file may be a link into a dataset elsewhere)
            quality["acorn_relative"] = str(path.relative_to(args.directory))
            counts["nodes"] += quality["n_nodes"]
            counts["edges"] += quality["n_edges"]
            counts["true"] += quality["n_true_edges"]
            counts["missing"] += quality["track_edges_missing"]
            counts["tracks"] += quality["n_track_edges"]
            yield graph, quality, kept

    provenance = {
        "source": "acorn",
        "source_directory": str(root),
        "pt_unit": args.pt_unit,
        "node_features": list(NODE_FEATURES),
        "edge_features": list(EDGE_FEATURES),
    }
    n_events = write_graphs(args.out, graphs(), provenance=provenance)
    print(
        f"imported {n_events} acorn events from {args.directory} -> {args.out}: "
        f"{counts['nodes']:,} hits, {counts['edges']:,} edges ({counts['true']:,} true), "
        f"{counts['tracks']:,} track edges of which {counts['missing']:,} missing from the graphs"
    )
    return 0


def run_export_acorn(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from partgnn.data.files.output_files import atomic_directory
    from partgnn.data.files.storage import GraphFile, ScoresFile
    from partgnn.errors import InputError

    with GraphFile(args.graphs) as graphs:
        imported = graphs.attrs.get("source") == "acorn"
    if not imported:
        return _export_built_graphs(args)
    if args.scores is None:
        raise InputError(
            f"{args.graphs}: import-acorn wrote it: give the SCORES to write into its acorn files"
        )
    scores_file, graphs = ScoresFile(args.scores), GraphFile(args.graphs)
    with scores_file, graphs:
        cut = _track_cut(args.cut, scores_file)
        index_of = {event_id: i for i, event_id in enumerate(graphs.event_ids)}
        _refuse_output_over_sources(
            args.out, graphs, [index_of.get(e) for e in scores_file.event_ids]
        )
        with atomic_directory(args.out, _is_acorn_event_file, what="export-acorn") as staging:
            for i, event_id in enumerate(tqdm(scores_file.event_ids, desc="export-acorn")):
                if event_id not in index_of:
                    raise InputError(f"{args.graphs}: no event {event_id} (it is in {args.scores})")
                _export_event(
                    graphs, index_of[event_id], scores_file[i], staging, args.tracks, cut,
                    where=f"{args.scores}: event {event_id}",
                )  # fmt: skip
    print(
        f"wrote {len(scores_file.event_ids)} acorn event files -> {args.out}"
        + (f" (tracks: {args.tracks}, cut {cut:g})" if args.tracks != "none" else "")
    )
    return 0


def _track_cut(given: float | None, scores_file) -> float:
    """The cut ``--tracks`` builds with: ``--cut``, else the one infer recorded, else the
    default."""
    if given is not None:
        return given
    recorded = scores_file.attrs.get("score_cut") if scores_file is not None else None
    return float(recorded if recorded else SCORE_CUT)


def _export_built_graphs(args: argparse.Namespace) -> int:
    """``export-acorn`` of a graphs file built here: every event (of SCORES, if given) as an
    acorn file made from the graph (:mod:`partgnn.data.formats.acorn_export`)."""
    from contextlib import nullcontext

    import numpy as np
    import torch
    from tqdm import tqdm

    from partgnn.data.files.output_files import atomic_directory
    from partgnn.data.files.storage import GraphFile, ScoresFile
    from partgnn.data.formats.acorn import write_acorn_file
    from partgnn.data.formats.acorn_export import graph_to_acorn_fields
    from partgnn.errors import InputError
    from partgnn.metrics.track_building import build_tracks

    scores_file = ScoresFile(args.scores) if args.scores is not None else None
    if scores_file is None and args.tracks != "none":
        raise InputError("export-acorn --tracks: give the SCORES the tracks are built from")
    with GraphFile(args.graphs) as graphs, scores_file or nullcontext():
        index_of = {event_id: i for i, event_id in enumerate(graphs.event_ids)}
        event_ids = graphs.event_ids if scores_file is None else scores_file.event_ids
        cut = _track_cut(args.cut, scores_file)
        with atomic_directory(args.out, _is_acorn_event_file, what="export-acorn") as staging:
            for i, event_id in enumerate(tqdm(event_ids, desc="export-acorn")):
                if event_id not in index_of:
                    raise InputError(f"{args.graphs}: no event {event_id} (it is in {args.scores})")
                graph = graphs[index_of[event_id]]
                scores = None if scores_file is None else scores_file[i]
                if scores is not None and scores.shape != (graph.edge_index.shape[1],):
                    raise InputError(
                        f"{args.scores}: event {event_id} has {scores.shape[0]} scores, "
                        f"{args.graphs} {graph.edge_index.shape[1]} edges"
                    )
                fields = graph_to_acorn_fields(
                    graph, graphs.extra(index_of[event_id]), scores, pt_unit=args.pt_unit
                )
                if args.tracks != "none":
                    labels = build_tracks(graph.edge_index, scores, graph.num_nodes, cut=cut,
                                          method=args.tracks)  # fmt: skip
                    fields["labels"] = torch.from_numpy(np.asarray(labels))
                write_acorn_file(staging / f"event{event_id:09d}.pyg", fields)
    print(f"wrote {len(event_ids)} acorn event files -> {args.out} (from {args.graphs})")
    return 0


def _is_acorn_event_file(relative: Path) -> bool:
    """Whether a file in an ``export-acorn`` folder is one it writes (an acorn ``.pyg`` file)."""
    return relative.suffix == ".pyg"


def _refuse_output_over_sources(out: Path, graphs, indices: list[int | None]) -> None:
    """Refuses an ``--out`` folder that holds the acorn files the events were imported from (the
    folder is replaced whole, and every event's file is read again from its source)."""
    from partgnn.data.files.output_files import is_within
    from partgnn.errors import InputError

    folder = Path(out).resolve()
    for index in indices:
        if index is None:
            continue
        source = Path(str(graphs.quality(index)["acorn_source"])).resolve()
        if is_within(source, folder):
            raise InputError(
                f"{out}: the output folder holds the acorn files the graphs were imported from "
                f"({source}), and the folder is replaced when the output is written: choose "
                "another --out"
            )


def _export_event(
    graphs, index: int, scores, staging: Path, tracks: str, cut: float, *, where: str
) -> None:
    """Writes one event's acorn file again, with its scores (and track labels) added."""
    import numpy as np
    import torch

    from partgnn.data.formats.acorn import (
        EDGE_TRACK_LABELS,
        NAMINGS,
        load_acorn_file,
        write_acorn_file,
    )
    from partgnn.errors import InputError
    from partgnn.metrics.track_building import build_tracks

    quality = graphs.quality(index)
    source = Path(str(quality["acorn_source"]))
    fields = load_acorn_file(source)
    naming = NAMINGS[str(quality["acorn_naming"])]
    n_edges = int(fields["edge_index"].shape[1])
    if scores.shape != (n_edges,):
        raise InputError(
            f"{where} has {scores.shape[0]} scores, {source} {n_edges} edges "
            "(not the file that was imported?)"
        )
    fields[naming.edge_scores] = torch.from_numpy(scores.astype(np.float32))
    if tracks != "none":
        graph = graphs[index]
        labels = build_tracks(graph.edge_index, scores, graph.num_nodes, cut=cut, method=tracks)
        fields[naming.hit_track_labels] = torch.from_numpy(labels)
        if naming.name == "prefixed":
            src, dst = graph.edge_index.numpy()
            same = (labels[src] == labels[dst]) & (labels[src] >= 0)
            fields[EDGE_TRACK_LABELS] = torch.from_numpy(np.where(same, labels[src], -1))
    target = staging / str(quality["acorn_relative"])
    target.parent.mkdir(parents=True, exist_ok=True)
    write_acorn_file(target, fields)
