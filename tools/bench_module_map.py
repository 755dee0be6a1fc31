"""Module-map graph construction against the geometric builder, on held-out events.

For each events file event and each builder (the geometric one, and every ``NAME=MAP.npz``
given), builds the graph and reports, averaged over the events: edges per event, the target
construction efficiency (true doublets of particles with pT > ``--pt-min`` present as edges),
the all-particle efficiency ``build-graphs`` prints, edge purity and seconds per event. With
``--coverage``, also, per map, the share of the target doublets that lie on a recorded module
pair and, of those, the share inside the pair's windows (what limits a map: coverage or
windows). Prints markdown rows (``--record``: the builders' figures on the current-figures page)::

    OMP_NUM_THREADS=1 .venv/bin/python tools/bench_module_map.py bench-full/events-test.h5 \\
        floor0.5=maps/pt1-floor0.5.npz --coverage
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from _common import ToolParser, record_table

from partgnn.data.detector.geometry import default_geometry
from partgnn.data.files.storage import EventFile
from partgnn.data.graphs.graph_builder import build_event_graph, module_doublets
from partgnn.data.graphs.graph_config import GraphBuildConfig
from partgnn.data.module_map.map_file import ModuleMap
from partgnn.data.module_map.pretrained_maps import resolve_map


def main() -> None:
    parser = ToolParser(__doc__.split("\n\n")[0], figures="module_map")
    parser.add_argument("events", type=Path, help="held-out events file")
    parser.add_argument("maps", nargs="*", metavar="NAME=MAP", help="module maps to compare")
    parser.add_argument("--pt-min", type=float, default=1.0, help="target particles' pT above")
    parser.add_argument("--coverage", action="store_true", help="also pair coverage and windows")
    parser.add_argument(
        "--maps-only",
        action="store_true",
        help="leave the geometric builder out (slow: ~1.8M edges)",
    )
    args = parser.parse_args()
    geometry = default_geometry()
    maps = {
        name: ModuleMap.load(resolve_map(path))
        for name, path in (m.split("=", 1) for m in args.maps)
    }
    rows: dict[str, list[tuple[float, ...]]] = {}
    coverage: dict[str, list[tuple[float, float]]] = {}
    with EventFile(args.events) as events:
        for event in events:
            targets = module_doublets(event, geometry, pt_min=args.pt_min)
            target_pairs = _target_pairs(event, geometry, args.pt_min)
            builders = [*([] if args.maps_only else [("geometric", None)]), *maps.items()]
            for name, module_map in builders:
                start = time.perf_counter()
                graph, quality = build_event_graph(event, geometry, GraphBuildConfig(), module_map)
                seconds = time.perf_counter() - start
                rows.setdefault(name, []).append(
                    (
                        graph.edge_index.shape[1],
                        _target_efficiency(graph, target_pairs),
                        quality.efficiency,
                        quality.purity,
                        seconds,
                    )
                )
                if args.coverage and module_map is not None:
                    coverage.setdefault(name, []).append(_coverage(module_map, *targets))
    print(
        "| builder | edges per event | target construction efficiency | all-particle efficiency "
        "| edge purity | seconds per event |"
    )
    print("|---|---|---|---|---|---|")
    measurements = []
    n_events = len(next(iter(rows.values()), []))
    for name, values in rows.items():
        edges, target, every, purity, seconds = np.mean(values, axis=0)
        print(
            f"| {name} | {edges:,.0f} | {target:.4f} | {every:.4f} | {purity:.4f} | {seconds:.1f} |"
        )
        measurements.append({"builder": name, "edges": float(edges), "target": float(target),
                             "purity": float(purity), "seconds": float(seconds)})  # fmt: skip
    record_table(
        args.record, f"builders-{args.events.stem}",
        f"Graph construction of the held-out events of {args.events.name} ({n_events} events): "
        f"target construction efficiency (true doublets of particles with pT > "
        f"{args.pt_min:g} GeV kept as edges), edges and seconds per event",
        measurements, row_label="{builder}", column_label="efficiency, edges, purity, seconds",
        cell="{target:.4f}, {edges:,.0f}, {purity:.4f}, {seconds:.1f} s",
    )  # fmt: skip
    if coverage:
        print("\n| map | target doublets on a recorded pair | of those, inside its windows |")
        print("|---|---|---|")
        for name, values in coverage.items():
            on_pair, inside = np.mean(values, axis=0)
            print(f"| {name} | {on_pair:.4f} | {inside:.4f} |")


def _target_pairs(event, geometry, pt_min: float) -> np.ndarray:
    """The true doublets ``(M, 2)`` (hit rows) of particles with pT > ``pt_min``."""
    from partgnn.data.graphs.graph_builder import particle_properties, true_consecutive_pairs

    hits = event.hits
    layer = geometry.layer_index(hits["volume_id"].to_numpy(), hits["layer_id"].to_numpy())
    pid = event.truth["particle_id"].to_numpy().astype(np.int64)
    pt, vertex = particle_properties(event, pid)
    xyz = np.stack([hits[c].to_numpy() for c in ("x", "y", "z")], axis=1).astype(np.float64)
    pairs = true_consecutive_pairs(pid, layer, np.linalg.norm(xyz - vertex, axis=1))
    return pairs[pt[pairs[:, 0]] > pt_min]


def _target_efficiency(graph, pairs: np.ndarray) -> float:
    """Share of the doublets ``pairs`` (hit rows = node indices: no pT cut on hits) that are
    edges of ``graph``."""
    if len(pairs) == 0:
        return float("nan")
    n = graph.num_nodes
    src, dst = graph.edge_index.numpy()
    edge_keys = np.unique(np.minimum(src, dst) * n + np.maximum(src, dst))
    keys = np.minimum(pairs[:, 0], pairs[:, 1]) * n + np.maximum(pairs[:, 0], pairs[:, 1])
    if len(edge_keys) == 0:
        return 0.0
    pos = np.minimum(np.searchsorted(edge_keys, keys), len(edge_keys) - 1)
    return float((edge_keys[pos] == keys).mean())


def _coverage(
    module_map: ModuleMap, source: np.ndarray, target: np.ndarray, features: np.ndarray
) -> tuple[float, float]:
    """Share of doublets on a recorded module pair, and of those inside its windows."""
    # Rows of the doublets' pairs in the map, by a search over (source, target) as one key
    # (16 bytes compared as bytes: the sort and the search agree on that order).
    as_void = np.dtype((np.void, 16))
    map_keys = np.ascontiguousarray(np.stack([module_map.source, module_map.target], axis=1))
    map_keys = map_keys.view(as_void).ravel()
    order = np.argsort(map_keys, kind="stable")
    sorted_keys = map_keys[order]
    wanted = np.ascontiguousarray(np.stack([source, target], axis=1)).view(as_void).ravel()
    pos = np.minimum(np.searchsorted(sorted_keys, wanted), len(sorted_keys) - 1)
    found = sorted_keys[pos] == wanted
    row = order[pos[found]]
    inside = np.all(
        (features[found] >= module_map.low[row]) & (features[found] <= module_map.high[row]),
        axis=1,
    )
    return float(found.mean()), float(inside.mean()) if inside.size else float("nan")


if __name__ == "__main__":
    main()
