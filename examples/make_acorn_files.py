"""Writes acorn event files of a simulated dataset: a stand-in for the output of acorn's graph
construction stage (GNN4ITkTeam/CommonFramework), for examples/acorn_to_halo.sh.

A real user skips this: their acorn run already wrote ``trainset/``, ``valset/`` and
``testset/`` folders of ``event<id>-graph.pyg`` files. These files use acorn's field names
(``hit_*`` per hit, ``edge_*`` per edge, ``track_*`` per true segment, pT in MeV, as ITk files).

    python examples/make_acorn_files.py --graphs data/graphs.h5 --out data/acorn
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch_geometric.data import Data

from partgnn.data.files.storage import GraphFile

#: Events per folder, in file order: the rest go to testset/.
SPLIT = (("trainset", 0.6), ("valset", 0.2))


def acorn_event(graph: Data) -> Data:
    """One event in acorn's prefixed naming: hits, the graph's edges with their truth, and
    the true segments (each a graph edge here: ``track_to_edge_map``)."""
    pos = graph.pos.double()
    true = torch.nonzero(graph.y.bool()).flatten()
    track_edges = graph.edge_index[:, true]
    first = track_edges[0]
    event = Data()
    fields = {
        "hit_id": graph.hit_id, "hit_x": pos[:, 0].float(), "hit_y": pos[:, 1].float(),
        "hit_z": pos[:, 2].float(), "hit_r": torch.hypot(pos[:, 0], pos[:, 1]).float(),
        "hit_phi": torch.atan2(pos[:, 1], pos[:, 0]).float(),
        "edge_index": graph.edge_index, "edge_y": graph.y.bool(),
        "track_edges": track_edges, "track_to_edge_map": true,
        "track_particle_id": graph.particle_id[first],
        "track_particle_pt": (graph.particle_pt[first].double() * 1000.0).float(),  # MeV
        "event_id": f"{graph.event_id:09d}",
    }  # fmt: skip
    for name, value in fields.items():
        event[name] = value
    return event


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", type=Path, required=True, help="partgnn graphs file")
    parser.add_argument("--out", type=Path, required=True, help="folder for the acorn files")
    args = parser.parse_args()
    with GraphFile(args.graphs) as graphs:
        events = list(graphs)
    bounds, start = [], 0
    for folder, share in SPLIT:
        bounds.append((folder, start, start + max(1, round(share * len(events)))))
        start = bounds[-1][2]
    bounds.append(("testset", start, len(events)))
    for folder, begin, end in bounds:
        (args.out / folder).mkdir(parents=True, exist_ok=True)
        for graph in events[begin:end]:
            name = f"event{graph.event_id:09d}-graph.pyg"
            torch.save(acorn_event(graph), args.out / folder / name)
    print(f"wrote {len(events)} acorn event files under {args.out}")


if __name__ == "__main__":
    main()
