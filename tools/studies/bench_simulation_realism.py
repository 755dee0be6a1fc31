"""Simulated vs real hits per particle (overlapping modules).

Counts, from the truth rows, each particle's hits, the layers it crossed, and the share of
(particle, layer) pairs with two or more hits, in the real TrackML sample event and in a
simulated event (pile-up 50, so that it holds several hundred pT > 1 GeV particles):

    .venv/bin/python tools/studies/bench_simulation_realism.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

# tools/: the helpers the studies share with the benchmarks (_common, _paths, _rank_step).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import ToolParser
from _paths import sample_dir

from partgnn.data.detector.geometry import default_geometry
from partgnn.data.formats.trackml_reader import read_trackml_events
from partgnn.data.simulation.simulate import SimulationConfig, simulate_event


def main() -> None:
    parser = ToolParser(__doc__)
    parser.add_argument("--pileup", type=float, default=50.0)
    parser.add_argument("--overlap-scale", type=float, nargs="+", default=[0.0, 1.0])
    parser.tiny(pileup=3.0, overlap_scale=[1.0])
    args = parser.parse_args()
    print(
        "| events | pT cut | particles | hits per particle: mean | median | 10/25/75/90 % "
        "| layers per particle | (particle, layer) pairs with 2+ hits |"
    )
    print("|---|---|---|---|---|---|---|---|")
    sample = sample_dir()
    if sample is None:
        raise SystemExit("bench_simulation_realism: the real TrackML sample is needed")
    real = next(read_trackml_events(sample))
    _rows("real TrackML sample", real.hits, real.truth, real.particles)
    for scale in args.overlap_scale:
        event = simulate_event(
            default_geometry(),
            SimulationConfig(pileup=args.pileup, overlap_scale=scale),
            event_id=1,
            seed=5,
        )
        label = f"simulated pile-up {args.pileup:g}, overlap_scale {scale:g}"
        _rows(label, event.hits, event.truth, event.particles)


def _rows(label: str, hits: pd.DataFrame, truth: pd.DataFrame, particles: pd.DataFrame) -> None:
    pt = particles.set_index("particle_id").eval("sqrt(px ** 2 + py ** 2)")
    signal = hits.assign(particle_id=truth["particle_id"].to_numpy())
    signal = signal[signal["particle_id"] != 0]
    signal = signal.assign(pt=pt.reindex(signal["particle_id"]).to_numpy())
    for cut in (1.0, 0.0):
        selected = signal[signal["pt"] > cut]
        per_particle = selected.groupby("particle_id").size()
        per_layer = selected.groupby(["particle_id", "volume_id", "layer_id"]).size()
        quantiles = "/".join(f"{q:g}" for q in per_particle.quantile([0.1, 0.25, 0.75, 0.9]))
        print(
            f"| {label} | {'> ' + format(cut, 'g') + ' GeV' if cut else 'none'} "
            f"| {len(per_particle)} | {per_particle.mean():.2f} | {per_particle.median():g} "
            f"| {quantiles} | {per_layer.groupby(level=0).size().mean():.2f} "
            f"| {(per_layer >= 2).mean():.3f} |"
        )


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
