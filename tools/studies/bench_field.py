"""The magnetic field along the beam, measured from the truth of events: Bz(|z|) and Br.

Between two consecutive hits of a particle its direction turns by ``d u / d s = 0.3 q / p
(u x B)`` [1/m]; the truth momenta at the hits give ``u`` and ``p``, their positions the path
``s`` and the midpoint. In each band of ``|z|`` (every radius together, both signs of z folded
so that a solenoid's ``Br sign(z)`` is one number) the field is the least-squares solution of
those equations for ``(Br sign(z), Bz)``, pairs further than 4 MADs from it dropped
(multiple scattering's tails) and solved again. On a uniform-field simulation it gives the
simulation's 2 T and ``Br`` 0; on the real TrackML sample, the field the real events were made
in (issue 50: the profile in ``configs/detector/trackml.yaml`` is this tool's ``Bz`` column on
the real sample, ``--yaml``)::

    .venv/bin/python tools/studies/bench_field.py                  # the real sample
    .venv/bin/python tools/studies/bench_field.py --simulate --pileup 20
    .venv/bin/python tools/studies/bench_field.py --simulate --field-profile --module-planes
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np

# tools/: the helpers the studies share with the benchmarks (_common, _paths, _rank_step).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import ToolParser
from _paths import sample_dir

from partgnn.data.detector.geometry import default_geometry
from partgnn.data.formats.trackml_reader import read_trackml_events
from partgnn.data.graphs.graph_builder import particle_properties, true_consecutive_pairs
from partgnn.data.simulation.simulate import SimulationConfig, simulate_event

#: Fewest particle steps a band's field is solved from.
MIN_STEPS = 20


def main() -> None:
    parser = ToolParser(__doc__)
    parser.add_argument("--simulate", action="store_true", help="a simulated event instead")
    parser.add_argument("--pileup", type=float, default=20.0)
    parser.add_argument("--field-profile", action="store_true", help="simulate with the profile")
    parser.add_argument("--module-planes", action="store_true", help="simulate on module planes")
    parser.add_argument("--pt-min", type=float, default=0.3, help="particles above [GeV]")
    parser.add_argument("--band", type=float, default=200.0, help="|z| band width [mm]")
    parser.add_argument("--yaml", action="store_true", help="also the b_field_profile lines")
    parser.tiny(simulate=True, pileup=2.0, band=1000.0)
    args = parser.parse_args()
    geometry = default_geometry()
    if args.simulate:
        config = SimulationConfig(pileup=args.pileup, field_profile=args.field_profile,
                                  module_planes=args.module_planes)  # fmt: skip
        event = simulate_event(geometry, config, event_id=1, seed=1)
        label = f"simulated pile-up {args.pileup:g}" + (", field profile" * args.field_profile)
    else:
        sample = sample_dir()
        if sample is None:
            sys.exit("bench_field: the real TrackML sample is needed (or --simulate)")
        event = next(read_trackml_events(sample))
        label = "real TrackML sample"
    steps = particle_steps(event, geometry, args.pt_min)
    print(f"{label}: {len(steps['z']):,} steps of particles above {args.pt_min:g} GeV\n")
    print("| abs z [mm] | steps | radius [mm], median | Bz [T] | Br sign(z) [T] |")
    print("|---|---|---|---|---|")
    knots = []
    edges = np.arange(0.0, 3000.0 + args.band, args.band)
    for low, high in itertools.pairwise(edges):
        band = (np.abs(steps["z"]) >= low) & (np.abs(steps["z"]) < high)
        if band.sum() < MIN_STEPS:
            continue
        br, bz = solve_field(steps, band)
        knots.append(((low + high) / 2, bz))
        print(f"| {low:.0f}-{high:.0f} | {band.sum()} | {np.median(steps['r'][band]):.0f} "
              f"| {bz:.3f} | {br:.3f} |")  # fmt: skip
    if args.yaml:
        z = ", ".join(f"{k[0]:.0f}" for k in knots)
        b = ", ".join(f"{k[1]:.3f}" for k in knots)
        print(f"\nb_field_profile: {{abs_z: [0, {z}], bz: [{knots[0][1]:.3f}, {b}]}}")


def particle_steps(event, geometry, pt_min: float) -> dict[str, np.ndarray]:
    """Per step between two consecutive hits (on two layers) of a particle above ``pt_min``:
    the turn per field unit ``(M, 3)`` and the two unit vectors it is a combination of."""
    hits, truth = event.hits, event.truth
    layer = geometry.layer_index(hits["volume_id"].to_numpy(), hits["layer_id"].to_numpy())
    particle = truth["particle_id"].to_numpy().astype(np.int64)
    pt, vertex = particle_properties(event, particle)
    position = truth[["tx", "ty", "tz"]].to_numpy(np.float64)
    momentum = truth[["tpx", "tpy", "tpz"]].to_numpy(np.float64)
    pairs = true_consecutive_pairs(particle, layer, np.linalg.norm(position - vertex, axis=1))
    pairs = pairs[(pt[pairs[:, 0]] > pt_min) & (layer[pairs[:, 0]] != layer[pairs[:, 1]])]
    charge = event.particles.set_index("particle_id")["q"].reindex(particle[pairs[:, 0]])
    first, second = momentum[pairs[:, 0]], momentum[pairs[:, 1]]
    p = 0.5 * (np.linalg.norm(first, axis=1) + np.linalg.norm(second, axis=1))
    u1 = first / np.linalg.norm(first, axis=1, keepdims=True)
    u2 = second / np.linalg.norm(second, axis=1, keepdims=True)
    middle = u1 + u2
    middle /= np.linalg.norm(middle, axis=1, keepdims=True)
    path = np.linalg.norm(position[pairs[:, 1]] - position[pairs[:, 0]], axis=1)
    midpoint = 0.5 * (position[pairs[:, 0]] + position[pairs[:, 1]])
    r = np.hypot(midpoint[:, 0], midpoint[:, 1])
    radial = np.stack([midpoint[:, 0] / r, midpoint[:, 1] / r, np.zeros_like(r)], axis=1)
    per_tesla = 0.3 * charge.to_numpy() / (1000.0 * p) * path
    sign = np.sign(midpoint[:, 2])[:, None]
    return {
        "turn": (u2 - u1) / per_tesla[:, None],
        "by_br": np.cross(middle, radial) * sign,
        "by_bz": np.cross(middle, [0.0, 0.0, 1.0]),
        "z": midpoint[:, 2],
        "r": r,
    }


def solve_field(steps: dict[str, np.ndarray], band: np.ndarray) -> tuple[float, float]:
    """``(Br sign(z), Bz)`` [T] of the steps in ``band``: least squares, outliers dropped."""
    design = np.stack([steps["by_br"][band].ravel(), steps["by_bz"][band].ravel()], axis=1)
    target = steps["turn"][band].ravel()
    keep = np.ones(len(target), dtype=bool)
    solution = np.zeros(2)
    for _ in range(3):
        solution, *_ = np.linalg.lstsq(design[keep], target[keep], rcond=None)
        residual = np.abs(target - design @ solution)
        keep = residual < 4 * 1.4826 * np.median(residual[keep])
    return float(solution[0]), float(solution[1])


if __name__ == "__main__":
    main()
