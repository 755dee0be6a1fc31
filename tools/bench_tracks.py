"""Benchmark of track building and track metrics on an event-sized graph (1e5 hits, 1e6 edges).

Random edges and scores (seed 3), 1e4 particles: the time of ``build_tracks`` plus
``track_metrics`` for each track-building method, and of ``track_metrics`` alone on labels
that are 90 % right. Best of ``--repeats``; one thread. Prints a markdown table; ``--record``
writes it into docs/results/figures/tracks.json (the target, from issue 8: under 1 s each)::

    OMP_NUM_THREADS=1 .venv/bin/python tools/bench_tracks.py --repeats 5 --record
"""

from __future__ import annotations

import os

import numpy as np
import torch
from _common import ToolParser, best_of, markdown_table, record_table


def main() -> None:
    parser = ToolParser(__doc__, figures="tracks")
    parser.add_argument("--hits", type=int, default=100_000)
    parser.add_argument("--edges", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.tiny(hits=10_000, edges=100_000, repeats=1)
    args = parser.parse_args()
    torch.set_num_threads(1)

    from partgnn.metrics.track_building import build_tracks
    from partgnn.metrics.tracks import track_metrics

    rng = np.random.default_rng(3)
    particle_id = rng.integers(0, 10_000, args.hits)
    particle_pt = rng.exponential(1.0, 10_000)[particle_id]
    weight = rng.random(args.hits)
    edge_index = rng.integers(0, args.hits, (2, args.edges))
    scores = rng.random(args.edges)

    print(f"{args.hits:,} hits, {args.edges:,} edges; {os.cpu_count()} cores, one thread\n")
    size = f"{args.hits:,} hits, {args.edges:,} random edges"
    measurements = []
    for method in ("components", "walk"):

        def build_and_score(method=method) -> None:
            labels = build_tracks(edge_index, scores, args.hits, cut=0.999, method=method)
            track_metrics(labels, particle_id, particle_pt=particle_pt, hit_weight=weight)

        seconds = best_of(build_and_score, args.repeats)
        measurements.append({"what": f"build_tracks ({method}) + track_metrics",
                             "seconds": seconds})  # fmt: skip
    labels = np.where(rng.random(args.hits) < 0.9, particle_id, -1)
    seconds = best_of(
        lambda: track_metrics(labels, particle_id, particle_pt=particle_pt, hit_weight=weight),
        args.repeats,
    )
    measurements.append({"what": "track_metrics (90 % right labels)", "seconds": seconds})
    rows = [(f"{m['what']}, {size}", f"{m['seconds']:.3f} s") for m in measurements]
    print(markdown_table(("what", f"seconds (best of {args.repeats})"), rows))
    record_table(
        args.record, "tracks",
        f"Seconds to build and match tracks on {size} and random scores (best of "
        f"{args.repeats}, one thread; target: under 1 s)",
        [{**m, "size": size} for m in measurements],
        row_label="{what}", column_label="{size}", cell="{seconds:.3f} s",
    )  # fmt: skip


if __name__ == "__main__":
    main()
