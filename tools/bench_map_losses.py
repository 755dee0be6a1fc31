"""Where a module map loses the target doublets of real and simulated events (issue 50).

For every true doublet of a particle above ``--pt-min`` (1 GeV) of the real TrackML sample
event and of ``--events`` simulated pile-up events, the first reason the map does not build it:
its module pair is not recorded; its features fall outside the pair's windows (which: z0,
dphi, phi_slope, deta; a doublet can fail several); or it is inside them but in no accepted
triplet (the map's triplet windows on how z0 and the phi slope change along a track). Per
source, the shares of all target doublets, and what is kept of the doublets of particles made
near the beam line (production vertex radius below 1 mm: the collisions' own particles) and of
displaced ones (secondaries: simulated with ``--secondaries``), and the same shares for the
beam line's doublets alone; then by volume pair the losses::

    OMP_NUM_THREADS=1 .venv/bin/python tools/bench_map_losses.py                # shipped map
    OMP_NUM_THREADS=1 .venv/bin/python tools/bench_map_losses.py --field-profile --module-planes
    OMP_NUM_THREADS=1 .venv/bin/python tools/bench_map_losses.py --field-profile --module-planes \\
        --secondaries --events 3
    OMP_NUM_THREADS=1 .venv/bin/python tools/bench_map_losses.py --map MAP.npz --by-volume
    OMP_NUM_THREADS=1 .venv/bin/python tools/bench_map_losses.py --map MAP.npz --field-profile \\
        --module-planes --secondaries --events 3 --floor 0.5 0.2 0.2 0.5 --triplet-floor 0.5

``--floor``/``--triplet-floor`` widen the map's windows to larger floors (the map a fit with
them gives, without the fit: issue 50's floor sweep).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from _common import ToolParser
from _paths import sample_dir

from partgnn.data.detector.geometry import default_geometry
from partgnn.data.formats.trackml_reader import read_trackml_events
from partgnn.data.graphs.graph_builder import particle_properties, true_consecutive_pairs
from partgnn.data.module_map.edges import module_map_edges
from partgnn.data.module_map.fit import typical_widths
from partgnn.data.module_map.map_file import WINDOW_FEATURES, ModuleMap, module_keys, pair_features
from partgnn.data.module_map.pretrained_maps import resolve_map
from partgnn.data.simulation.simulate import SimulationConfig, simulate_event
from partgnn.errors import InputError

#: Production vertex radius [mm] above which a particle counts as displaced (a secondary).
DISPLACED_MM = 1.0


def main() -> None:
    parser = ToolParser(__doc__.split("\n\n")[0])
    parser.add_argument("--map", default=None, help="module map (default: pretrained:trackml-full)")
    parser.add_argument("--events", type=int, default=1, help="simulated events")
    parser.add_argument("--pileup", type=float, default=200.0)
    parser.add_argument("--seed", type=int, default=2001, help="first simulated event's seed")
    parser.add_argument("--module-planes", action="store_true")
    parser.add_argument("--field-profile", action="store_true")
    parser.add_argument("--secondaries", action="store_true")
    parser.add_argument("--pt-min", type=float, default=1.0)
    parser.add_argument("--by-volume", action="store_true", help="also by volume pair")
    parser.add_argument(
        "--floor", type=float, nargs=4, default=None, metavar="F",
        help="widen the map's windows to these floors (z0 dphi phi_slope deta): the map a fit "
        "with them gives, without fitting again",
    )  # fmt: skip
    parser.add_argument(
        "--triplet-floor", type=float, default=None, metavar="F",
        help="widen the triplets' windows to this floor likewise",
    )  # fmt: skip
    parser.tiny(pileup=5.0)
    args = parser.parse_args()
    geometry = default_geometry()
    module_map = ModuleMap.load(resolve_map(args.map or "pretrained:trackml-full"))
    if args.floor is not None or args.triplet_floor is not None:
        try:
            module_map = widened(module_map, args.floor, args.triplet_floor)
        except InputError as err:
            parser.error(str(err))
    sources = []
    sample = sample_dir()
    if sample is not None:
        sources.append(("real TrackML sample", [next(read_trackml_events(sample))]))
    config = SimulationConfig(pileup=args.pileup, module_planes=args.module_planes,
                              field_profile=args.field_profile,
                              secondaries=args.secondaries)  # fmt: skip
    label = (f"simulated pile-up {args.pileup:g}" + ", module planes" * args.module_planes
             + ", field profile" * args.field_profile + ", secondaries" * args.secondaries
             + f" ({args.events} events)")  # fmt: skip
    simulated = (simulate_event(geometry, config, event_id=args.seed + k, seed=args.seed + k)
                 for k in range(args.events))  # fmt: skip
    sources.append((label, simulated))
    print("| events | target doublets | kept | no recorded pair | outside a doublet window "
          "(z0 / dphi / phi_slope / deta) | no accepted triplet | kept: vertex r < 1 mm "
          "/ displaced (share of targets) | edges per event |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    by_volume = []
    for label, events in sources:
        losses = [losses_of(event, geometry, module_map, args.pt_min) for event in events]
        joined = {key: np.concatenate([loss[key] for loss in losses]) for key in losses[0]}
        print(_row(label, joined, np.ones(len(joined["kept"]), dtype=bool)))
        print(_row(f"{label}, from the beam line", joined, ~joined["displaced"]))
        by_volume.append((label, joined))
    if args.by_volume:
        for label, joined in by_volume:
            print(f"\n{label}: losses by volume pair (share of the pair's targets)\n")
            print("| volumes | targets | lost | no pair | window | triplet |")
            print("|---|---|---|---|---|---|")
            for pair in np.unique(joined["volumes"]):
                mine = joined["volumes"] == pair
                print(f"| {pair // 100}->{pair % 100} | {mine.sum()} "
                      f"| {1 - joined['kept'][mine].mean():.3f} "
                      f"| {joined['no_pair'][mine].mean():.3f} "
                      f"| {joined['window'][mine].mean():.3f} "
                      f"| {joined['triplet'][mine].mean():.3f} |")  # fmt: skip


def widened(module_map: ModuleMap, floor, triplet_floor: float | None) -> ModuleMap:
    """``module_map`` with its windows widened to larger floors, as a fit with them makes it.

    A floor widens every window by F times the median width of the rows seen >= 20 times; adding
    one width to every window shifts that median by it, so the unwidened median is the stored
    one over ``1 + 2 (width + F)`` (``minmax`` windows; float32 windows to within a step).

    Raises:
        InputError: A map of ``rms`` windows, or a floor below the map's own.
    """
    settings = module_map.settings
    if settings.get("window", "minmax") != "minmax":
        raise InputError("--floor/--triplet-floor: the map's windows are not minmax windows")
    grow = 1 + 2 * float(settings.get("width", 0.0))
    low, high = module_map.low, module_map.high
    if floor is not None:
        old = np.broadcast_to(np.asarray(settings.get("floor", 0.0), float), (len(floor),))
        new = np.asarray(floor, float)
        if (new < old).any():
            raise InputError(f"--floor {floor}: below the map's floors {old.tolist()}")
        typical = typical_widths(low, high, module_map.count, "module pair", "--floor")
        median = typical / (grow + 2 * old)
        low, high = low - (new - old) * median, high + (new - old) * median
    triplets = module_map.triplets
    if triplet_floor is not None and triplets is not None:
        old_t = float(settings.get("triplet_floor", 0.0))
        if triplet_floor < old_t:
            raise InputError(f"--triplet-floor {triplet_floor}: below the map's {old_t}")
        typical = typical_widths(
            triplets.low, triplets.high, triplets.count, "module triplet", "--triplet-floor"
        )
        median = typical / (1 + 2 * old_t)
        grown = (triplet_floor - old_t) * median
        triplets = dataclasses.replace(triplets, low=triplets.low - grown,
                                       high=triplets.high + grown)  # fmt: skip
    return dataclasses.replace(module_map, low=low, high=high, triplets=triplets)


def losses_of(event, geometry, module_map: ModuleMap, pt_min: float) -> dict[str, np.ndarray]:
    """Per target doublet of ``event``: kept, and the first reason it is not."""
    hits = event.hits
    layer = geometry.layer_index(hits["volume_id"].to_numpy(), hits["layer_id"].to_numpy())
    particle = event.truth["particle_id"].to_numpy().astype(np.int64)
    pt, vertex = particle_properties(event, particle)
    xyz = hits[["x", "y", "z"]].to_numpy(np.float64)
    pairs = true_consecutive_pairs(particle, layer, np.linalg.norm(xyz - vertex, axis=1))
    pairs = pairs[pt[pairs[:, 0]] > pt_min]
    module = module_keys(layer, hits["module_id"].to_numpy())
    kept, n_edges = _built(module_map, module, xyz, pairs)
    by_doublets, _ = _built(dataclasses.replace(module_map, triplets=None), module, xyz, pairs)
    row, recorded = _pair_rows(module_map, module[pairs[:, 0]], module[pairs[:, 1]])
    features = pair_features(xyz, pairs[:, 0], pairs[:, 1])
    outside = recorded[:, None] & (
        (features < module_map.low[row]) | (features > module_map.high[row])
    )
    volume = hits["volume_id"].to_numpy()
    return {
        "kept": kept,
        "no_pair": ~recorded,
        "outside": outside,
        "window": outside.any(axis=1),
        "triplet": by_doublets & ~kept,
        "volumes": volume[pairs[:, 0]] * 100 + volume[pairs[:, 1]],
        "displaced": np.hypot(vertex[pairs[:, 0], 0], vertex[pairs[:, 0], 1]) > DISPLACED_MM,
        "n_edges": np.array([n_edges]),
    }


def _row(label: str, joined: dict[str, np.ndarray], mine: np.ndarray) -> str:
    """The table's row of the target doublets ``mine`` (bool, one per doublet)."""
    outside = joined["outside"][mine]
    each = " / ".join(f"{outside[:, j].mean():.4f}" for j in range(len(WINDOW_FEATURES)))
    return (
        f"| {label} | {mine.sum():,} | {joined['kept'][mine].mean():.4f} "
        f"| {joined['no_pair'][mine].mean():.4f} | {joined['window'][mine].mean():.4f} ({each}) "
        f"| {joined['triplet'][mine].mean():.4f} | {_kept(joined, False)} / "
        f"{_kept(joined, True)} ({joined['displaced'].mean():.3f}) "
        f"| {joined['n_edges'].mean():,.0f} |"
    )


def _kept(joined: dict[str, np.ndarray], displaced: bool) -> str:
    mine = joined["displaced"] == displaced
    return f"{joined['kept'][mine].mean():.4f}" if mine.any() else "-"


def _built(module_map: ModuleMap, module, xyz, pairs: np.ndarray) -> tuple[np.ndarray, int]:
    """Which of ``pairs`` ``(M, 2)`` the map builds as edges, and how many edges it builds."""
    first, second = module_map_edges(module_map, module, xyz)
    n = len(xyz)
    edges = np.unique(first * n + second)
    keys = pairs[:, 0] * n + pairs[:, 1]
    if len(edges) == 0:
        return np.zeros(len(pairs), dtype=bool), 0
    return edges[np.minimum(np.searchsorted(edges, keys), len(edges) - 1)] == keys, len(first)


def _pair_rows(module_map: ModuleMap, source, target) -> tuple[np.ndarray, np.ndarray]:
    """The map's row of each module pair and whether it is recorded (16-byte keys)."""
    as_void = np.dtype((np.void, 16))
    keys = np.ascontiguousarray(np.stack([module_map.source, module_map.target], 1))
    keys = keys.view(as_void).ravel()
    order = np.argsort(keys, kind="stable")
    wanted = np.ascontiguousarray(np.stack([source, target], 1)).view(as_void).ravel()
    position = np.minimum(np.searchsorted(keys[order], wanted), len(keys) - 1)
    return order[position], keys[order][position] == wanted


if __name__ == "__main__":
    main()
