"""Data-stage sub-commands: ``simulate``, ``import-trackml``, ``fit-module-map``,
``build-graphs``, ``info``."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING

# Light imports only: the pipeline (torch, PyG, pandas) is imported when a command runs.
from partgnn.cli.arg_types import fraction, non_negative_float, positive_int, seed
from partgnn.cli.data_tables import EventStats, print_graph_table
from partgnn.cli.output_guard import add_overwrite_option
from partgnn.data.files import output_kinds
from partgnn.data.graphs.graph_config import GraphBuildConfig

if TYPE_CHECKING:
    pass


#: A module map is reported thin when more than this share of the data would fall outside it
#: (true doublets on pairs it never saw, or hits on modules it never saw).
THIN_MAP_SHARE = 0.01


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the data-stage sub-commands to the ``partgnn`` parser."""
    geometry_help = "detector geometry: YAML or TrackML detectors.csv(.gz) (default: TrackML)"

    simulate = subparsers.add_parser(
        "simulate", help="simulate pile-up events in the TrackML detector"
    )
    simulate.add_argument("--events", type=positive_int, default=10, help="number of events")
    simulate.add_argument("--pileup", type=non_negative_float, default=200.0, help="pile-up mu")
    simulate.add_argument("--seed", type=seed, default=0, help="random seed")
    simulate.add_argument("--first-event-id", type=int, default=0, help="id of the first event")
    simulate.add_argument("--noise-fraction", type=fraction, default=None, help="noise hits")
    simulate.add_argument("--geometry", default=None, help=geometry_help)
    simulate.add_argument(
        "--workers", type=positive_int, default=1,
        help="processes simulating events side by side (the same events for any number)",
    )  # fmt: skip
    _add_realism_options(simulate)
    simulate.add_argument("--out", required=True, type=Path, help="output events file (.h5)")
    simulate.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing --out (without it, only an events file of the same simulation "
        "is written again)",
    )
    simulate.set_defaults(run=run_simulate)

    trackml = subparsers.add_parser(
        "import-trackml", help="read TrackML CSV(.gz) events into an events file"
    )
    trackml.add_argument("directory", type=Path, help="folder with eventNNN-hits.csv(.gz) files")
    trackml.add_argument("--geometry", default=None, help=geometry_help)
    trackml.add_argument("--out", required=True, type=Path, help="output events file (.h5)")
    trackml.add_argument(
        "--ignore-cells",
        action="store_true",
        help="do not read the events' -cells files (by default they give each hit its "
        "cluster features)",
    )
    add_overwrite_option(trackml, output_kinds.TRACKML_EVENTS)
    trackml.set_defaults(run=run_import_trackml)

    fit = subparsers.add_parser(
        "fit-module-map",
        help="learn a module map (module pairs tracks cross, with windows) from training events",
    )
    fit.add_argument(
        "events", type=Path, nargs="*", help="training events files (their truth is read)"
    )
    fit.add_argument(
        "--simulate", action="append", default=[], metavar="SEED:FIRST:EVENTS",
        help="also fit to events simulated on the fly, as partgnn simulate --seed SEED "
        "--first-event-id FIRST --events EVENTS would write them (nothing is written; the same "
        "events from a file give the same map, byte for byte); repeatable",
    )  # fmt: skip
    fit.add_argument(
        "--pileup", type=non_negative_float, default=200.0, help="pile-up of --simulate events"
    )
    fit.add_argument(
        "--workers", type=positive_int, default=1, help="processes simulating --simulate events"
    )
    _add_realism_options(fit, "--simulate events: ")
    fit.add_argument("--out", required=True, type=Path, help="output module map (.npz)")
    add_overwrite_option(fit, output_kinds.MODULE_MAP)
    fit.add_argument(
        "--pt-min", type=non_negative_float, default=0.0,
        help="learn from particles of pT at least this [GeV] (default 0: every particle)",
    )  # fmt: skip
    fit.add_argument(
        "--max-vertex-radius", type=non_negative_float, default=None, metavar="MM",
        help="learn only from particles produced within this distance of the beam line [mm] "
        "(default: every particle, secondaries too)",
    )  # fmt: skip
    fit.add_argument(
        "--window", choices=("minmax", "rms"), default="minmax",
        help="per pair: [min, max] widened by --width x its width, or mean +- --width x rms",
    )  # fmt: skip
    fit.add_argument("--width", type=non_negative_float, default=0.0, help="see --window")
    fit.add_argument(
        "--window-precision", choices=("float64", "float32"), default="float64",
        help="store the windows in float32, rounded outward (half the file; every window the "
        "same or wider by one float32 step; how shipped maps are stored)",
    )  # fmt: skip
    fit.add_argument(
        "--floor", type=non_negative_float, nargs="+", default=[0.0], metavar="F",
        help="widen every window by F times the median width (per quantity) of the pairs seen "
        ">= 20 times, each side (pairs seen a few times have point-like windows); one F, or "
        "four for z0, dphi, phi_slope, deta (e.g. 0.25 0.1 0.1 0.25)",
    )  # fmt: skip
    fit.add_argument(
        "--triplets", action="store_true",
        help="also learn module triplets (three consecutive hits of a track) with windows on "
        "how z0 and the phi slope change along them; build-graphs then keeps only doublets of "
        "an accepted triplet",
    )  # fmt: skip
    fit.add_argument(
        "--triplet-floor", type=non_negative_float, default=0.0, metavar="F",
        help="widen the triplets' windows like --floor (one F)",
    )  # fmt: skip
    fit.add_argument("--geometry", default=None, help=geometry_help)
    fit.set_defaults(run=run_fit_module_map)

    build = subparsers.add_parser("build-graphs", help="build event graphs from an events file")
    build.add_argument("events", type=Path, help="events file from simulate or import-trackml")
    build.add_argument("--out", required=True, type=Path, help="output graphs file (.h5)")
    add_overwrite_option(build, output_kinds.GRAPHS)
    build.add_argument("--geometry", default=None, help=geometry_help)
    build.add_argument(
        "--workers", type=positive_int, default=1,
        help="processes building graphs side by side (the same graphs for any number)",
    )  # fmt: skip
    build.add_argument(
        "--method", choices=("geometric", "module-map"), default="geometric",
        help="edges by geometric cuts between adjacent layers (default) or by a module map",
    )  # fmt: skip
    build.add_argument(
        "--map", type=Path, default=None,
        help="module map (with --method module-map): a file, or pretrained:NAME for the map of "
        "a shipped model's graphs (its map ships with it)",
    )  # fmt: skip
    for field in dataclasses.fields(GraphBuildConfig):
        build.add_argument(
            "--" + field.name.replace("_", "-"),
            type=non_negative_float,
            default=None,
            help="graph construction setting (default: see GraphBuildConfig; cut values "
            "depend on --pt-min)",
        )
    build.set_defaults(run=run_build_graphs)

    info = subparsers.add_parser("info", help="print what an events or graphs file holds")
    info.add_argument("file", type=Path)
    info.set_defaults(run=run_info)


def _add_realism_options(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """``--field-profile``, ``--module-planes`` and ``--secondaries`` (each with its ``--no-``
    form): the simulation's realism switches (issue 50), on by default."""
    parser.add_argument(
        "--field-profile", action=argparse.BooleanOptionalAction, default=True,
        help=f"{prefix}tracks bend in the geometry's measured field Bz(|z|) (issue 50; default), "
        "or in a uniform one (--no-field-profile)",
    )  # fmt: skip
    parser.add_argument(
        "--module-planes", action=argparse.BooleanOptionalAction, default=True,
        help=f"{prefix}hits on the detector's module planes where tracks cross them (overlaps "
        "from the modules' layout; issue 50; default), or on ideal cylinders and disks "
        "(--no-module-planes)",
    )  # fmt: skip
    parser.add_argument(
        "--secondaries", action=argparse.BooleanOptionalAction, default=True,
        help=f"{prefix}hadrons interact in the layers' material and emit charged secondaries, "
        "and K0S and Lambdas decay into charged pairs (issue 50; default); --no-secondaries: "
        "primaries only",
    )  # fmt: skip


def run_simulate(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from partgnn.data.detector.geometry import load_geometry
    from partgnn.data.simulation.simulated_file import write_simulated_events
    from partgnn.data.simulation.simulation_config import SimulationConfig

    overrides = {"pileup": args.pileup}
    if args.noise_fraction is not None:
        overrides["noise_fraction"] = args.noise_fraction
    config = SimulationConfig(
        **overrides,
        module_planes=args.module_planes,
        field_profile=args.field_profile,
        secondaries=args.secondaries,
    )
    stats = EventStats()
    n_events = write_simulated_events(
        args.out, load_geometry(args.geometry), config,
        events=args.events, seed=args.seed, first_event_id=args.first_event_id,
        workers=args.workers, overwrite=args.overwrite,
        watch=lambda events: stats.track(
            tqdm(events, total=args.events, desc="simulate", unit="event")
        ),
    )  # fmt: skip
    stats.print(f"simulated {n_events} events (pile-up {args.pileup:g}) -> {args.out}")
    return 0


def run_import_trackml(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from partgnn.data.detector.geometry import load_geometry
    from partgnn.data.files.writers import write_events
    from partgnn.data.formats.trackml_reader import find_trackml_events, read_trackml_event

    geometry = load_geometry(args.geometry)
    found = find_trackml_events(args.directory)
    cells = not args.ignore_cells
    events = (read_trackml_event(prefix, geometry=geometry, cells=cells) for _, prefix in found)
    stats = EventStats()
    n_events = write_events(
        args.out,
        stats.track(tqdm(events, total=len(found), desc="import", unit="event")),
        provenance={"source": "trackml", "directory": str(args.directory.resolve())},
    )
    stats.print(f"imported {n_events} TrackML events from {args.directory} -> {args.out}")
    return 0


def map_fit_settings(args: argparse.Namespace) -> dict[str, object]:
    """The keyword arguments of :func:`~partgnn.data.module_map.fit_files.fit_module_map_file`
    that ``fit-module-map``'s options give (all but ``--out``)."""
    from partgnn.data.module_map.recorded_fit import map_fit_of

    simulated, fit = map_fit_of(args)
    return {"events_files": args.events, "simulated": simulated, "geometry": args.geometry,
            "fit": fit}  # fmt: skip


def run_fit_module_map(args: argparse.Namespace) -> int:
    from partgnn.data.files.h5_files import file_sha256
    from partgnn.data.files.output_files import check_output_path
    from partgnn.data.module_map.doublets import SimulatedRun
    from partgnn.data.module_map.fit_files import fit_module_map_file
    from partgnn.data.module_map.fit_time import say_fit_time
    from partgnn.errors import InputError

    runs = [SimulatedRun.parse(text) for text in args.simulate]
    if not args.events and not runs:
        raise InputError("fit-module-map: give events files, --simulate SEED:FIRST:EVENTS, or both")
    check_output_path(args.out)
    settings = map_fit_settings(args)
    say_fit_time(settings["simulated"])
    fitted = fit_module_map_file(args.out, **settings)
    module_map = fitted.module_map
    counts = {"events": fitted.events, "doublets": fitted.doublets}
    triplets = module_map.triplets
    print(
        f"module map of {len(module_map):,} module pairs"
        + (f" and {len(triplets.count):,} triplets" if triplets is not None else "")
        + f" from {counts['doublets']:,} true doublets of {counts['events']} events -> "
        f"{args.out} (sha256 {file_sha256(args.out)})"
    )
    unseen = module_map.unseen_pair_share()
    if unseen > THIN_MAP_SHARE:
        once = int((module_map.count == 1).sum())
        print(
            f"partgnn: warning: the map is thin for its data: {once:,} "
            f"of its module pairs were seen once, so about {unseen:.1%} of a new event's true "
            "doublets lie on pairs it never saw (Good-Turing estimate); fit it on more events",
            file=sys.stderr,
        )
    return 0


def run_build_graphs(args: argparse.Namespace) -> int:
    from partgnn.data.detector.geometry import load_geometry
    from partgnn.data.graphs.event_graphs import write_event_graphs
    from partgnn.data.module_map.map_file import ModuleMap
    from partgnn.data.module_map.pretrained_maps import resolve_map
    from partgnn.errors import InputError

    if (args.method == "module-map") != (args.map is not None):
        raise InputError("build-graphs: --map goes with --method module-map, and it needs one")
    if args.map is not None:
        args.map = resolve_map(args.map)  # pretrained:NAME: that model's map, made and checked
    geometry = load_geometry(args.geometry)
    cuts = {
        field.name: getattr(args, field.name)
        for field in dataclasses.fields(GraphBuildConfig)
        if getattr(args, field.name) is not None
    }
    config = GraphBuildConfig(**cuts).resolved(geometry.b_field)
    written = write_event_graphs(
        args.events, args.out, geometry, config, args.map, workers=args.workers
    )
    print_graph_table(written.quality, by_map=args.map is not None)
    print(f"built {written.n_graphs} graphs -> {args.out}")
    _warn_empty_graphs(written.quality, args.out)
    if args.map is not None and written.unmapped_share > THIN_MAP_SHARE:
        fitted_on = ModuleMap.load(args.map).settings.get("events", "?")
        print(
            f"partgnn: warning: {args.map}: {written.unmapped_share:.1%} of the hits lie on "
            f"modules the map never saw (fitted on {fitted_on} events): no edge reaches "
            "them; fit the map on more events (or events like these)",
            file=sys.stderr,
        )
    return 0


def _warn_empty_graphs(rows: list[dict[str, float]], out: Path) -> None:
    """Warns (one line each) of events whose graph has no nodes or no edges: nothing to train
    or score there, most often cuts that select nothing (``--pt-min``, ``--phi-slope-max``)."""
    for field, what in (("nodes", "no nodes (no hit passes the cuts)"),
                        ("edges", "no edges (no hit pair passes the cuts)")):  # fmt: skip
        empty = [int(row["event_id"]) for row in rows if not row.get(f"n_{field}")]
        if empty:
            shown = ", ".join(map(str, empty[:5])) + (", ..." if len(empty) > 5 else "")
            print(
                f"partgnn: warning: {out}: {len(empty)} of {len(rows)} graphs have {what}: "
                f"event {shown}; nothing to train or score there: check the cuts",
                file=sys.stderr,
            )
            return


def run_info(args: argparse.Namespace) -> int:
    from partgnn.data.files.h5_files import verify_datasets
    from partgnn.data.files.storage import EventFile, GraphFile, open_store

    with open_store(args.file) as store:
        print(f"{args.file}: {store.attrs.get('format')} v{store.attrs.get('format_version')}")
        for key in sorted(store.attrs):
            if key not in ("format", "format_version"):
                print(f"  {key}: {store.attrs[key]}")
        if isinstance(store, EventFile):
            stats = EventStats()
            for _ in stats.track(iter(store)):
                pass
            stats.print(f"{len(store)} events")
        elif isinstance(store, GraphFile):
            rows = [{"event_id": e, **store.quality(i)} for i, e in enumerate(store.event_ids)]
            print_graph_table(rows, by_map=store.attrs.get("method") == "module-map")
        else:
            edges = [len(store[i]) for i in range(len(store))]
            print(f"{len(store)} events, {sum(edges):,} scored edges")
        datasets = verify_datasets(store.path, store.h5)
    print(f"{datasets} datasets read: every checksum holds")
    return 0
