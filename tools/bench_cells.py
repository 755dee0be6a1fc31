"""Cluster shapes, simulated against real: per volume (or layer) of the TrackML detector, the
mean cluster extent along u and v [cells], charge and cell count of the real sample event's hits
beside the simulation's (issue 70), and what reading and simulating cells costs::

    .venv/bin/python tools/bench_cells.py --events 4 --pileup 200 --out data/cells
    .venv/bin/python tools/bench_cells.py --by layer --out data/cells

Signal and noise hits are compared apart (``--hits``). ``diff / sigma`` is the difference of
the means over their combined standard error. A volume's mean cluster depends on the tracks'
incidence as much as on the sensors, and the simulation's tracks are not the sample's (more
inclined ones in the pixel barrel), so signal hits are also compared at the real incidence: the
simulated hits reweighted to the real sample's share in each bin of the incidence along u and v
(the path's extent in cells through one module thickness; the ``at real incidence`` column).
The plot (``cells.png`` under ``--out``) shows each volume's means against the real ones.
The cost: one event simulated with its cells against the same simulation without them (the
cells' share of its time), and what ``import-trackml`` does per event (read the CSV files, write
the events file) with and without the cells file, best of ``--repeats``, one thread: on the real
sample (5,527 hits) and on full-size events, simulated pile-up-200 events written as TrackML
CSV files with their simulated cells (``--full-size``, under ``--out``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from _common import ToolParser, best_of, markdown_table, record_table
from _paths import sample_dir

from partgnn.data.detector.detector_modules import detector_modules
from partgnn.data.detector.geometry import default_geometry
from partgnn.data.files.writers import write_events
from partgnn.data.formats.cluster_shapes import hit_modules
from partgnn.data.formats.trackml_reader import read_trackml_event
from partgnn.data.simulation.cell_simulation import event_cells, simulate_clusters
from partgnn.data.simulation.simulate import SimulationConfig, simulate_event

#: Bin edges of the incidence: the path's signed extent in cells through one module thickness.
INCIDENCE_BINS = np.array([-8, -4, -2, -1, -0.5, 0, 0.5, 1, 2, 4, 8])

#: The compared features: column -> what the table calls it.
FEATURES = {"extent_u": "size u", "extent_v": "size v", "cell_val": "charge",
            "cell_count": "cells"}  # fmt: skip


def main() -> None:
    parser = ToolParser(__doc__, figures="data")
    parser.add_argument("--events", type=int, default=2, help="simulated events")
    parser.add_argument("--pileup", type=float, default=200.0)
    parser.add_argument("--seed", type=int, default=70)
    parser.add_argument("--by", choices=("volume", "layer"), default="volume")
    parser.add_argument("--hits", choices=("signal", "noise", "all"), default="signal")
    parser.add_argument("--repeats", type=int, default=3, help="timing repeats (best of)")
    parser.add_argument("--out", type=Path, default=None, help="folder for cells.json, cells.png")
    parser.add_argument(
        "--full-size", action="store_true",
        help="also time the import of a simulated pile-up-200 event written as TrackML CSV files",
    )  # fmt: skip
    parser.tiny(pileup=5.0, events=1, repeats=1)
    args = parser.parse_args()
    torch_threads_one()
    sample = sample_dir()
    if sample is None:
        sys.exit("bench_cells: no real TrackML sample here (tests/fixtures/trackml-sample)")
    geometry = default_geometry()
    config = SimulationConfig(pileup=args.pileup, module_planes=True, field_profile=True,
                              secondaries=True)  # fmt: skip
    real = hits_table(read_trackml_event(sample / "event000000001"), geometry)
    events = (simulate_event(geometry, config, event_id=k, seed=args.seed)
              for k in range(args.events))  # fmt: skip
    simulated = pd.concat([hits_table(event, geometry) for event in events])
    rows = compare(select(real, args.hits), select(simulated, args.hits), args.by)
    print(f"cluster shapes, {args.hits} hits: real sample (1 event) against {args.events} "
          f"simulated pile-up-{args.pileup:g} event(s)")  # fmt: skip
    print(markdown_table(header(args.by), [row_cells(row, args.by) for row in rows]))
    cost = timing(geometry, config, sample, args.seed, args.repeats)
    if args.full_size:
        folder = (args.out or Path("bench-cells")) / "trackml-csv"
        cost.update(full_size_import(geometry, config, folder, args.seed, args.repeats))
    print(f"simulate, pile-up {args.pileup:g}: {cost['simulate_s']:.3f} s per event with cells, "
          f"{cost['cells_s']:.3f} s of it the cells: {cost['simulate_ratio']:.2f}x the "
          "simulation without them")  # fmt: skip
    print(
        f"import-trackml, the real sample: {cost['import_cells_s']:.3f} s with cells, "
        f"{cost['import_plain_s']:.3f} s without: {cost['import_ratio']:.2f}x"
    )
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "cells.json").write_text(
            json.dumps({"by": args.by, "hits": args.hits, "rows": rows, "cost": cost}, indent=1)
        )
        plot(rows, args.by, args.out / "cells.png")
        print(f"wrote {args.out / 'cells.json'} and {args.out / 'cells.png'}")
    record(args, rows, cost)


def torch_threads_one() -> None:
    """One thread for the timing (numpy's pools are set by the environment)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def hits_table(event, geometry) -> pd.DataFrame:
    """One row per hit: volume, layer, whether noise, the incidence bins and the cluster
    features."""
    hits, truth = event.hits, event.truth
    layer = geometry.layer_index(hits["volume_id"].to_numpy(), hits["layer_id"].to_numpy())
    on = hit_modules(detector_modules(geometry), layer, hits["module_id"].to_numpy(np.int64),
                     where=event.name)  # fmt: skip
    direction = np.einsum("nji,nj->ni", on.rotation, truth[["tpx", "tpy", "tpz"]].to_numpy(float))
    with np.errstate(divide="ignore", invalid="ignore"):
        extent = direction[:, :2] / direction[:, 2:] * (on.thickness[:, None] / on.pitch)
    extent = np.nan_to_num(extent, nan=0.0, posinf=99.0, neginf=-99.0)
    return pd.concat(
        [
            pd.DataFrame({
                "volume": hits["volume_id"].to_numpy(), "layer": hits["layer_id"].to_numpy(),
                "noise": truth["particle_id"].to_numpy() == 0,
                "bin_u": np.digitize(extent[:, 0], INCIDENCE_BINS),
                "bin_v": np.digitize(extent[:, 1], INCIDENCE_BINS),
            }),
            event.clusters.reset_index(drop=True),
        ],
        axis=1,
    )  # fmt: skip


def select(table: pd.DataFrame, hits: str) -> pd.DataFrame:
    if hits == "all":
        return table
    return table[table["noise"] == (hits == "noise")]


def compare(real: pd.DataFrame, simulated: pd.DataFrame, by: str) -> list[dict]:
    """Per group: each feature's real and simulated mean, standard error and the difference
    over their combined error."""
    keys = ["volume"] if by == "volume" else ["volume", "layer"]
    rows = []
    for key, mine in real.groupby(keys):
        key = key if isinstance(key, tuple) else (key,)
        theirs = simulated
        for name, value in zip(keys, key, strict=True):
            theirs = theirs[theirs[name] == value]
        row = {name: int(value) for name, value in zip(keys, key, strict=True)}
        row.update(real_hits=len(mine), simulated_hits=len(theirs))
        weight = reweighted(mine, theirs)
        for feature in FEATURES:
            a, b = mine[feature].to_numpy(float), theirs[feature].to_numpy(float)
            error_a = a.std(ddof=1) / np.sqrt(len(a)) if len(a) > 1 else np.nan
            error_b = b.std(ddof=1) / np.sqrt(len(b)) if len(b) > 1 else np.nan
            combined = np.hypot(error_a, error_b)
            row[feature] = {
                "real": float(a.mean()), "real_error": float(error_a),
                "simulated": float(b.mean()) if len(b) else float("nan"),
                "simulated_error": float(error_b),
                "sigma": float((b.mean() - a.mean()) / combined) if combined > 0 else 0.0,
                "at_real_incidence": float(np.average(b, weights=weight))
                if weight is not None else float("nan"),
            }  # fmt: skip
        rows.append(row)
    return rows


def reweighted(real: pd.DataFrame, simulated: pd.DataFrame) -> np.ndarray | None:
    """Weights ``(len(simulated),)`` that give the simulated hits the real ones' share in each
    (u, v) incidence bin (bins without simulated hits drop out); ``None`` for noise."""
    if real["noise"].any() or simulated["noise"].any() or not len(simulated):
        return None
    real_share = real.groupby(["bin_u", "bin_v"]).size() / len(real)
    simulated_count = simulated.groupby(["bin_u", "bin_v"]).size()
    per_bin = (real_share / simulated_count).fillna(0.0)
    keys = pd.MultiIndex.from_frame(simulated[["bin_u", "bin_v"]])
    weight = per_bin.reindex(keys).fillna(0.0).to_numpy()
    return weight if weight.sum() > 0 else None


def header(by: str) -> list[str]:
    keys = ["volume"] if by == "volume" else ["volume", "layer"]
    names = [f"{label}: real / sim (diff / sigma) / at real incidence"
             for label in FEATURES.values()]  # fmt: skip
    return [*keys, "hits real / sim", *names]


def row_cells(row: dict, by: str) -> list[str]:
    keys = [str(row["volume"])] + ([str(row["layer"])] if by == "layer" else [])
    cells = [f"{row['real_hits']} / {row['simulated_hits']}"]
    for feature in FEATURES:
        f = row[feature]
        cells.append(f"{f['real']:.2f} / {f['simulated']:.2f} ({f['sigma']:+.1f}) / "
                     f"{f['at_real_incidence']:.2f}")  # fmt: skip
    return [*keys, *cells]


def timing(geometry, config, sample: Path, seed: int, repeats: int) -> dict[str, float]:
    """What cells cost: the simulation with them against their own share, and the reader."""
    modules = detector_modules(geometry)
    simulate, cells = [], []
    for k in range(repeats):
        start = time.perf_counter()
        event = simulate_event(geometry, config, event_id=1000 + k, seed=seed)
        simulate.append(time.perf_counter() - start)
        start = time.perf_counter()
        simulate_clusters(event, geometry, modules, np.random.default_rng(k))
        cells.append(time.perf_counter() - start)
    best, share = min(simulate), float(np.median(cells))
    with_cells, plain = import_seconds(sample / "event000000001", geometry, repeats)
    return {
        "simulate_s": best, "cells_s": share, "simulate_ratio": best / max(best - share, 1e-9),
        "import_cells_s": with_cells, "import_plain_s": plain, "import_ratio": with_cells / plain,
    }  # fmt: skip


def import_seconds(prefix: Path, geometry, repeats: int) -> tuple[float, float]:
    """What ``import-trackml`` does for one event, with and without its cells: read its files
    and write the events file (best of ``repeats``)."""
    out = Path(tempfile.mkdtemp()) / "events.h5"

    def imported(cells: bool) -> None:
        write_events(out, [read_trackml_event(prefix, geometry=geometry, cells=cells)])
        out.unlink()

    return best_of(lambda: imported(True), repeats), best_of(lambda: imported(False), repeats)


def full_size_import(geometry, config, folder: Path, seed: int, repeats: int) -> dict:
    """The import's cost on a simulated pile-up-200 event written as TrackML CSV.gz files with
    its simulated cells."""
    event = simulate_event(geometry, dataclasses.replace(config, pileup=200.0),
                           event_id=1, seed=seed)  # fmt: skip
    cells, _ = event_cells(event, geometry, detector_modules(geometry), np.random.default_rng(1))
    folder.mkdir(parents=True, exist_ok=True)
    prefix = folder / event.name
    tables = {
        "hits": event.hits, "truth": event.truth, "particles": event.particles,
        "cells": pd.DataFrame({
            "hit_id": event.hits["hit_id"].to_numpy()[cells.hit], "ch0": cells.channel[:, 0],
            "ch1": cells.channel[:, 1], "value": cells.value.astype(np.float32),
        }),
    }  # fmt: skip
    for name, table in tables.items():
        table.to_csv(f"{prefix}-{name}.csv.gz", index=False)
    with_cells, plain = import_seconds(prefix, geometry, repeats)
    return {
        "full_hits": len(event.hits), "full_cells": len(cells.hit),
        "full_import_cells_s": with_cells, "full_import_plain_s": plain,
        "full_import_ratio": with_cells / plain,
    }  # fmt: skip


def plot(rows: list[dict], by: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [str(r["volume"]) if by == "volume" else f"{r['volume']}-{r['layer']}" for r in rows]
    x = np.arange(len(rows))
    figure, axes = plt.subplots(len(FEATURES), 1, figsize=(max(6, 0.35 * len(rows) + 3), 9),
                                sharex=True)  # fmt: skip
    for axis, (feature, label) in zip(axes, FEATURES.items(), strict=True):
        real = [r[feature]["real"] for r in rows]
        real_error = [r[feature]["real_error"] for r in rows]
        simulated = [r[feature]["simulated"] for r in rows]
        simulated_error = [r[feature]["simulated_error"] for r in rows]
        axis.errorbar(x - 0.1, real, yerr=real_error, fmt="o", label="real sample")
        axis.errorbar(x + 0.1, simulated, yerr=simulated_error, fmt="s", label="simulated")
        at_real = [r[feature]["at_real_incidence"] for r in rows]
        axis.plot(x + 0.2, at_real, "x", label="simulated, at the real incidence")
        axis.set_ylabel(f"mean {label}")
        axis.grid(alpha=0.3)
    axes[0].legend()
    axes[-1].set_xticks(x, labels, rotation=90 if by == "layer" else 0)
    axes[-1].set_xlabel(f"TrackML {by}")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def record(args, rows: list[dict], cost: dict[str, float]) -> None:
    """Writes the cells' cost (with against without, per step that reads or makes them) and the
    cluster shapes (per group and feature: real, simulated at the real incidence, and the plain
    means' difference in sigma) into the result file (``--record``)."""
    costs = [
        {"what": f"simulate, pile-up {args.pileup:g}", "with_s": cost["simulate_s"],
         "without_s": cost["simulate_s"] - cost["cells_s"], "ratio": cost["simulate_ratio"]},
        {"what": "import-trackml, the real sample", "with_s": cost["import_cells_s"],
         "without_s": cost["import_plain_s"], "ratio": cost["import_ratio"]},
    ]  # fmt: skip
    if "full_import_ratio" in cost:
        costs.append({
            "what": f"import-trackml, a full-size event ({cost['full_hits']:,} hits, "
            f"{cost['full_cells']:,} cells; simulated pile-up 200 as TrackML CSV.gz)",
            "with_s": cost["full_import_cells_s"], "without_s": cost["full_import_plain_s"],
            "ratio": cost["full_import_ratio"],
        })  # fmt: skip
    record_table(
        args.record, "cells_cost",
        "What cells cost (the realistic simulation, best of the repeats, one thread): the step "
        "with them against without (target <= 1.5x)",
        costs,
        row_label="{what}", column_label="with cells / without",
        cell="{ratio:.2f}x ({with_s:.3f} s / {without_s:.3f} s)",
    )  # fmt: skip
    keys = ["volume"] if args.by == "volume" else ["volume", "layer"]
    shapes = [
        {**{key: row[key] for key in keys}, "hits": row["real_hits"],
         "simulated_hits": row["simulated_hits"], "feature": label, **row[feature]}
        for row in rows for feature, label in FEATURES.items()
    ]  # fmt: skip
    group = "volume {volume}" if args.by == "volume" else "volume {volume}, layer {layer}"
    record_table(
        args.record, "cluster_shapes",
        f"Mean cluster shapes of the real sample's {args.hits} hits against {args.events} "
        f"simulated pile-up-{args.pileup:g} events, per {args.by}: real / simulated at the real "
        "incidence (the plain simulated mean's difference in sigma)",
        shapes,
        row_label=group + " ({hits:,} real hits)", column_label="{feature}",
        cell="{real:.2f} / {at_real_incidence:.2f} ({sigma:+.1f})",
    )  # fmt: skip


if __name__ == "__main__":
    main()
