"""Displaced (secondary) particles: the real TrackML sample against a simulated event.

A particle is displaced when it was produced more than 2 mm from the beam line. Per event: the
share of displaced particles among those that left a hit, among the target particles (pT > 1
GeV, at least 3 hits) and among the targets' doublets (a particle with n hits gives n - 1);
the displaced particles' production radius and pT percentiles, their proton share and their
median hit count against the primaries' (issue 50: the real sample's displaced particles are
~0.24 of those with hits, the simulation without ``--secondaries`` has none)::

    .venv/bin/python tools/studies/bench_secondaries.py --pileup 200 --secondaries \\
        --field-profile --module-planes
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

# tools/: the helpers the studies share with the benchmarks (_common, _paths, _rank_step).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import ToolParser, markdown_table
from _paths import sample_dir

from partgnn.data.detector.geometry import default_geometry
from partgnn.data.formats.trackml_reader import read_trackml_events
from partgnn.data.simulation.simulate import SimulationConfig, simulate_event

#: Production radius [mm] beyond which a particle counts as displaced.
DISPLACED_RADIUS = 2.0


def main() -> None:
    parser = ToolParser(__doc__)
    parser.add_argument("--pileup", type=float, default=200.0)
    parser.add_argument("--events", type=int, default=1, help="simulated events")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--secondaries", action="store_true", help="simulate them")
    parser.add_argument("--field-profile", action="store_true", help="simulate with the profile")
    parser.add_argument("--module-planes", action="store_true", help="simulate on module planes")
    parser.add_argument(
        "--interaction-length", type=float, default=SimulationConfig().interaction_length,
        help="the simulation's interaction_length [radiation lengths] (default: its default)",
    )  # fmt: skip
    parser.tiny(pileup=5.0)
    args = parser.parse_args()
    rows = []
    sample = sample_dir()
    if sample is None:
        print("bench_secondaries: no real TrackML sample here; simulation only", file=sys.stderr)
    else:
        rows.append(["real TrackML sample", *summary(next(read_trackml_events(sample)).particles)])
    config = SimulationConfig(pileup=args.pileup, secondaries=args.secondaries,
                              field_profile=args.field_profile, module_planes=args.module_planes,
                              interaction_length=args.interaction_length)  # fmt: skip
    geometry = default_geometry()
    particles = pd.concat(
        [
            simulate_event(
                geometry, config, event_id=args.seed * 1000 + k, seed=args.seed
            ).particles
            for k in range(args.events)
        ]
    )
    switches = [name for name in ("secondaries", "field_profile", "module_planes")
                if getattr(args, name)]  # fmt: skip
    label = f"simulated, pile-up {args.pileup:g} x {args.events} ({', '.join(switches) or 'plain'})"
    rows.append([label, *summary(particles)])
    print(markdown_table(HEADER, rows))


HEADER = [
    "events",
    "particles with hits",
    "displaced share",
    "of targets",
    "of target doublets",
    "radius pct 10/50/90 [mm]",
    "pT pct 10/50/90 [GeV]",
    "proton share",
    "median hits displaced / primary",
]


def summary(particles: pd.DataFrame) -> list[str]:
    """The table's cells for one particle table (TrackML columns)."""
    radius = np.hypot(particles["vx"], particles["vy"]).to_numpy()
    pt = np.hypot(particles["px"], particles["py"]).to_numpy()
    nhits = particles["nhits"].to_numpy()
    seen = nhits >= 1
    displaced = seen & (radius > DISPLACED_RADIUS)
    target = (pt > 1.0) & (nhits >= 3)
    doublets = np.maximum(nhits - 1, 0)

    def share(part: np.ndarray, whole: np.ndarray, weight: np.ndarray | None = None) -> str:
        w = np.ones(len(part)) if weight is None else weight
        total = w[whole].sum()
        return f"{w[part & whole].sum() / total:.3f}" if total else "-"

    def percentiles(values: np.ndarray, digits: int) -> str:
        if len(values) == 0:
            return "-"
        return "/".join(f"{v:.{digits}f}" for v in np.percentile(values, [10, 50, 90]))

    protons = np.abs(particles["particle_type"].to_numpy()) == 2212
    primary_hits = np.median(nhits[seen & ~displaced]) if (seen & ~displaced).any() else 0
    displaced_hits = np.median(nhits[displaced]) if displaced.any() else 0
    return [
        f"{seen.sum():,}",
        share(displaced, seen),
        share(displaced, target),
        share(displaced, target, doublets),
        percentiles(radius[displaced], 0),
        percentiles(pt[displaced], 2),
        f"{protons[displaced].mean():.2f}" if displaced.any() else "-",
        f"{displaced_hits:g} / {primary_hits:g}",
    ]


if __name__ == "__main__":
    main()
