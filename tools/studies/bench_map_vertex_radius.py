"""How far from the beam line a module map can learn from (issue 50): maps fitted on the same
simulated events (every realism switch), each on the doublets of particles made within one
radius of the beam line, compared on a held-out simulated event (edges, target doublets kept)
and on the real TrackML sample (target doublets kept), each split into particles made at the
beam line and displaced ones (as ``tools/bench_map_losses.py`` splits them)::

    OMP_NUM_THREADS=1 .venv/bin/python tools/studies/bench_map_vertex_radius.py --events 400 \\
        --radii 1 50 150 300

Fitted with the shipped map's settings (``--floor 0.25 0.1 0.1 0.25``, triplets,
``--triplet-floor 0.25``) on ``--events`` events simulated by ``--workers`` processes; a map
fitted on few events misses pairs, so compare the rows, not the levels.
"""

from __future__ import annotations

import multiprocessing
import sys
from functools import partial
from pathlib import Path

import numpy as np

# tools/: the helpers the studies share with the benchmarks (_common, _paths, _rank_step).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import ToolParser, markdown_table
from _paths import sample_dir
from bench_map_losses import losses_of

from partgnn.data.detector.geometry import default_geometry
from partgnn.data.formats.trackml_reader import read_trackml_events
from partgnn.data.graphs.graph_builder import module_doublets
from partgnn.data.module_map.fit import fit_module_map
from partgnn.data.module_map.map_file import ModuleMap
from partgnn.data.simulation.simulate import SimulationConfig, simulate_event


def main() -> None:
    parser = ToolParser(__doc__)
    parser.add_argument("--events", type=int, default=400, help="simulated events to fit on")
    parser.add_argument("--radii", type=float, nargs="+", default=[1.0, 50.0, 150.0, 300.0])
    parser.add_argument("--pileup", type=float, default=200.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--floor", type=float, nargs="+", default=[0.25, 0.1, 0.1, 0.25])
    parser.add_argument("--triplet-floor", type=float, default=0.25)
    parser.tiny(events=2, pileup=5.0, workers=1, floor=[0.0], triplet_floor=0.0)
    args = parser.parse_args()
    config = SimulationConfig(pileup=args.pileup, module_planes=True, field_profile=True,
                              secondaries=True)  # fmt: skip
    task = partial(_event_doublets, config=config, radii=tuple(args.radii))
    if args.workers > 1:
        with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
            per_event = pool.map(task, range(args.events), chunksize=4)
    else:
        per_event = [task(k) for k in range(args.events)]
    geometry = default_geometry()
    held_out = simulate_event(geometry, config, event_id=2000, seed=13)
    sample = sample_dir()
    real = next(read_trackml_events(sample)) if sample is not None else None
    rows = []
    for radius in args.radii:
        module_map = fit_module_map((event[radius] for event in per_event), floor=args.floor,
                                    triplet_floor=args.triplet_floor)  # fmt: skip
        edges, *simulated = _kept(held_out, module_map)
        row = [f"within {radius:g} mm", f"{edges:,}", _shares(*simulated)]
        row.append(_shares(*_kept(real, module_map)[1:]) if real is not None else "-")
        rows.append(row)
    header = ["particles learned from", "edges per simulated event",
              "simulated targets kept (beam line / displaced)",
              "real sample kept (beam line / displaced)"]  # fmt: skip
    print(markdown_table(header, rows))


def _event_doublets(k: int, *, config: SimulationConfig, radii: tuple[float, ...]) -> dict:
    """The doublets (and triplets) of simulated event ``k`` for each radius."""
    geometry = default_geometry()
    event = simulate_event(geometry, config, event_id=300000 + k, seed=43)
    return {r: module_doublets(event, geometry, pt_min=1.0, triplets=True, max_vertex_radius=r)
            for r in radii}  # fmt: skip


def _kept(event, module_map: ModuleMap) -> tuple[int, float, float, float]:
    """Edges the map builds on ``event`` and the shares of its target doublets kept: all,
    from the beam line, displaced (:func:`bench_map_losses.losses_of`)."""
    losses = losses_of(event, default_geometry(), module_map, pt_min=1.0)
    kept, displaced = losses["kept"], losses["displaced"]
    return int(losses["n_edges"][0]), _mean(kept), _mean(kept[~displaced]), _mean(kept[displaced])


def _mean(values: np.ndarray) -> float:
    return float(values.mean()) if len(values) else float("nan")


def _shares(every: float, beam_line: float, displaced: float) -> str:
    return f"{every:.3f} ({beam_line:.3f} / {displaced:.2f})"


if __name__ == "__main__":
    main()
