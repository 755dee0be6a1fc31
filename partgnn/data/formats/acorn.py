"""acorn event files (GNN4ITkTeam/CommonFramework) in and out.

acorn keeps one event per file: a ``torch_geometric.data.Data`` saved with ``torch.save``
(``event<id>-graph.pyg`` or ``event<id>.pyg``, under ``trainset/``, ``valset/``, ``testset/``).
Fields are named by prefix (``hit_*`` per node, ``edge_*`` per edge, ``track_*`` per true track
segment), or, in older files, without prefixes (:data:`NAMINGS`). Such a file is a pickle:
loading it unrestricted runs whatever it holds, so :func:`load_acorn_file` unpickles with
``weights_only=True`` and an allow-list of the PyG classes a ``Data`` is made of
(:data:`ACORN_SAFE_GLOBALS`); a file that names anything else is refused with one line.

:func:`acorn_to_graph` turns the fields into a partgnn graph (the fields of
:data:`~partgnn.data.graphs.graph_fields.GRAPH_FIELDS`, node and edge features as
:func:`~partgnn.data.graphs.graph_features.graph_features` computes them from the hit positions, so
a model trained on built graphs scores imported ones) plus every other per-node, per-edge and
per-track field, kept as they are. Edges keep acorn's order; each is directed from the hit at
the smaller radius to the larger (at equal radii, the smaller ``|z|``), as partgnn's graph
builder directs them and its models read them, and which were turned round is kept
(``edge_flipped``). :func:`write_acorn_file` writes an event back.

Glossary: a *track edge* is a true segment between consecutive hits of one particle
(``track_edges`` (2, T), node indices); ``track_to_edge_map`` (T,) gives the graph edge that is
that segment (-1 where the graph lacks it).
"""

from __future__ import annotations

import math
import os
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch_geometric.data.data as pyg_data
import torch_geometric.data.storage as pyg_storage
from torch_geometric.data import Data

from partgnn.data.files.zip_records import check_zip_records
from partgnn.data.graphs.graph_features import graph_features, outer_first
from partgnn.errors import InputError, first_line

#: The classes an acorn event file may name besides tensors: a PyG ``Data`` and its storages.
ACORN_SAFE_GLOBALS: tuple[type, ...] = (
    pyg_data.Data,
    pyg_data.DataEdgeAttr,
    pyg_data.DataTensorAttr,
    pyg_storage.GlobalStorage,
    pyg_storage.NodeStorage,
    pyg_storage.EdgeStorage,
)

#: acorn event file names: ``event<id>.pyg`` or ``event<id>-graph.pyg``.
FILE_PATTERN = re.compile(r"^event(\d+)(?:-graph)?\.pyg$")

#: pT units acorn files come in, as factors to GeV (ITk files: MeV; TrackML-based: GeV).
PT_UNITS = {"MeV": 1e-3, "GeV": 1.0}


@dataclass(frozen=True)
class Naming:
    """Where the fields partgnn needs are in one naming of acorn files.

    Attributes:
        name: ``"prefixed"`` (hit_*, edge_*, track_*) or ``"plain"`` (older files).
        hit_x, hit_y, hit_z, hit_r, hit_phi: Hit coordinates [mm, rad] (x and y may be absent
            in plain files, where ``y`` is the edge truth: they come from r and phi).
        hit_id: Hit identifiers.
        hit_particle_id: Particle of each hit, where the file has it.
        edge_y: Edge truth.
        edge_scores: Edge scores of a classifier stage.
        hit_track_labels: Track label of each hit (track building).
        track_particle_id: Particle of each track edge.
        track_particle_pt: pT of each track edge's particle.
        track_to_edge_map: Graph edge of each track edge (-1: missing).
    """

    name: str
    hit_x: str
    hit_y: str
    hit_z: str
    hit_r: str
    hit_phi: str
    hit_id: str
    hit_particle_id: str
    edge_y: str
    edge_scores: str
    hit_track_labels: str
    track_particle_id: str
    track_particle_pt: str
    track_to_edge_map: str


NAMINGS = {
    "prefixed": Naming(
        "prefixed", "hit_x", "hit_y", "hit_z", "hit_r", "hit_phi", "hit_id", "hit_particle_id",
        "edge_y", "edge_scores", "hit_track_labels", "track_particle_id", "track_particle_pt",
        "track_to_edge_map",
    ),
    "plain": Naming(
        "plain", "x", "", "z", "r", "phi", "hit_id", "", "y", "scores", "labels",
        "particle_id", "pt", "truth_map",
    ),
}  # fmt: skip

#: Per-edge field (prefixed naming) holding each edge's track label, written on export.
EDGE_TRACK_LABELS = "edge_track_labels"


def find_acorn_files(directory: str | os.PathLike[str]) -> list[Path]:
    """The acorn event files under ``directory`` (any depth), sorted by path.

    Raises:
        InputError: ``directory`` is not a folder, or holds no ``event*.pyg`` file.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(f"{directory}: not a folder of acorn event files")
    found = sorted(p for p in directory.rglob("*.pyg") if FILE_PATTERN.match(p.name))
    if not found:
        raise InputError(f"{directory}: no acorn event files (event<id>.pyg, event<id>-graph.pyg)")
    return found


def load_acorn_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The fields of an acorn event file, read without running code from it.

    Returns:
        Field name -> value (tensors, and plain values such as ``event_id`` or ``config``).

    Raises:
        InputError: The file is missing, not a ``torch.save`` file, names a class outside
            :data:`ACORN_SAFE_GLOBALS` (it would run code), or holds no PyG ``Data``.
    """
    path = Path(path)
    if path.is_file():
        check_zip_records(path)
    try:
        with torch.serialization.safe_globals(list(ACORN_SAFE_GLOBALS)):
            loaded = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    except pickle.UnpicklingError as err:
        named = re.search(r"GLOBAL ([\w.]+)", str(err))
        what = f"names {named.group(1)}" if named else first_line(err)
        raise InputError(
            f"{path}: refused: it {what}, which is not a PyG Data or tensor (loading it "
            "would run code)"
        ) from None
    except (RuntimeError, OSError, EOFError, ValueError) as err:
        raise InputError(f"{path}: not a readable torch.save file ({first_line(err)})") from None
    if not isinstance(loaded, Data):
        raise InputError(f"{path}: holds a {type(loaded).__name__}, not a PyG Data event")
    fields = dict(loaded.to_dict())
    for name, value in fields.items():
        if not torch.is_tensor(value):
            continue
        if value.device.type != "cpu":  # e.g. "meta": a tensor that holds no values
            raise InputError(
                f"{path}: field {name} is a tensor on the {value.device.type} device, which "
                "holds no values here: save the event with its tensors on the CPU"
            )
        if value.layout != torch.strided:
            raise InputError(f"{path}: field {name} is a {value.layout} tensor; dense expected")
    return fields


def detect_naming(fields: dict[str, Any], *, where: str) -> Naming:
    """The naming of an event's fields: prefixed when it has ``edge_y`` or ``hit_*`` coordinates.

    Raises:
        InputError: Neither naming's edge truth and hit coordinates are present.
    """
    if "edge_y" in fields or "hit_z" in fields:
        return NAMINGS["prefixed"]
    if "z" in fields and "y" in fields:
        return NAMINGS["plain"]
    raise InputError(
        f"{where}: neither acorn naming: no edge_y/hit_z (prefixed) nor y/z (plain) field"
    )


def event_id_of(fields: dict[str, Any], path: Path) -> int:
    """The event's id: its ``event_id`` field (an int, a string of digits, or a list of one),
    else the digits of its file name.

    Raises:
        InputError: Neither gives an integer.
    """
    value = fields.get("event_id")
    if isinstance(value, list | tuple) and len(value) == 1:
        value = value[0]
    if torch.is_tensor(value) and value.numel() == 1:
        value = value.item()
    try:
        if value is not None:
            return int(value)
    except (TypeError, ValueError):
        pass
    match = FILE_PATTERN.match(path.name)
    if match is None:
        raise InputError(f"{path}: no integer event_id field and no event<id> file name")
    return int(match.group(1))


def acorn_to_graph(
    fields: dict[str, Any], *, path: Path, pt_unit: str = "MeV"
) -> tuple[Data, dict[str, np.ndarray], dict[str, object]]:
    """A partgnn graph from an acorn event's fields.

    Args:
        fields: From :func:`load_acorn_file`.
        path: The file (for messages and the event id).
        pt_unit: Unit of the file's pT (:data:`PT_UNITS`).

    Returns:
        ``(graph, kept, quality)``: ``graph`` has the fields of
        :data:`~partgnn.data.graphs.graph_fields.GRAPH_FIELDS` and ``event_id`` (N nodes, E edges;
        ``particle_id`` and ``particle_pt`` per hit from its track edges, 0 for hits on none;
        ``edge_pt`` the pT of a true edge's particle, 0 for false edges; ``layer`` -1: acorn
        files carry modules, not partgnn's layers); ``kept`` every other tensor field that has
        one row per node, edge or track edge, under its own name, plus ``edge_flipped`` (E,)
        bool; ``quality`` the event's counts (nodes, edges, true edges, track edges missing
        from the graph) and construction efficiency and purity.

    Raises:
        InputError: A field partgnn needs is missing, has the wrong number of rows, or an
            index is out of range.
    """
    where = str(path)
    naming = detect_naming(fields, where=where)
    tensors = {k: v for k, v in fields.items() if torch.is_tensor(v)}
    edge_index = _required(tensors, "edge_index", where).long()
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise InputError(
            f"{where}: edge_index must have shape (2, E), got {tuple(edge_index.shape)}"
        )
    xyz = _hit_positions(tensors, naming, where)
    n_nodes, n_edges = xyz.shape[0], edge_index.shape[1]
    _check_indices(edge_index, n_nodes, "edge_index", where)
    y = _rows(_required(tensors, naming.edge_y, where), n_edges, naming.edge_y, where).bool()
    hit_id = _rows(_required(tensors, naming.hit_id, where), n_nodes, naming.hit_id, where).long()

    particle_id, particle_pt, track_info = _hit_truth(tensors, naming, n_nodes, pt_unit, where)
    src, dst = edge_index[0].numpy(), edge_index[1].numpy()
    flipped = outer_first(src, dst, np.hypot(xyz[:, 0], xyz[:, 1]), xyz[:, 2])
    src, dst = np.where(flipped, dst, src), np.where(flipped, src, dst)
    x, edge_attr = graph_features(xyz, src, dst)
    y_np = y.numpy()
    edge_pt = np.where(y_np, particle_pt[src], 0.0)
    graph = Data(
        x=torch.from_numpy(x),
        pos=torch.from_numpy(xyz.astype(np.float32)),
        edge_index=torch.from_numpy(np.stack([src, dst]).astype(np.int64)),
        edge_attr=torch.from_numpy(edge_attr),
        y=y.to(torch.float32),
        edge_pt=torch.from_numpy(edge_pt.astype(np.float32)),
        hit_id=hit_id,
        particle_id=torch.from_numpy(particle_id),
        particle_pt=torch.from_numpy(particle_pt.astype(np.float32)),
        layer=torch.full((n_nodes,), -1, dtype=torch.int64),
        event_id=event_id_of(fields, path),
    )
    graph.num_nodes = n_nodes
    n_tracks = track_info["n_track_edges"]
    kept: dict[str, np.ndarray] = {"edge_flipped": flipped}
    for name, value in tensors.items():
        if name == "edge_index" or value.dim() == 0:
            continue
        if value.shape[0] in (n_nodes, n_edges, n_tracks) or name == "track_edges":
            kept[name] = value.numpy()
    quality = {
        "n_nodes": n_nodes,
        "n_edges": n_edges,
        "n_true_edges": int(y_np.sum()),
        "purity": float(y_np.mean()) if n_edges else math.nan,
        # Construction efficiency: the share of the true segments the graph has as edges.
        "efficiency": 1.0 - track_info["track_edges_missing"] / n_tracks if n_tracks else math.nan,
        "acorn_naming": naming.name,
        "acorn_source": str(path.resolve()),
        **track_info,
    }
    return graph, kept, quality


def write_acorn_file(path: str | os.PathLike[str], fields: dict[str, Any]) -> None:
    """Writes an event's fields as an acorn event file (a PyG ``Data`` with ``torch.save``).

    The caller makes the write atomic (the file goes into a staging folder).
    """
    data = Data()
    for name, value in fields.items():
        data[name] = value
    with open(path, "wb") as handle:
        torch.save(data, handle)
        handle.flush()
        os.fsync(handle.fileno())


def _required(tensors: dict[str, torch.Tensor], name: str, where: str) -> torch.Tensor:
    if not name or name not in tensors:
        raise InputError(f"{where}: missing field {name!r}")
    return tensors[name]


def _rows(value: torch.Tensor, n: int, name: str, where: str) -> torch.Tensor:
    if value.dim() == 0 or value.shape[0] != n:
        raise InputError(f"{where}: {name} has shape {tuple(value.shape)}, expected {n} rows")
    return value


def _check_indices(index: torch.Tensor, n: int, name: str, where: str, *, low: int = 0) -> None:
    if index.numel() and (int(index.min()) < low or int(index.max()) >= n):
        raise InputError(f"{where}: {name} refers to rows outside {low}..{n - 1}")


def _hit_positions(tensors: dict[str, torch.Tensor], naming: Naming, where: str) -> np.ndarray:
    """(N, 3) float64 hit x, y, z [mm]: from x, y, z where the file has them, else r, phi, z."""
    z = _required(tensors, naming.hit_z, where).double().numpy()
    if naming.hit_x in tensors and naming.hit_y and naming.hit_y in tensors:
        x = _rows(tensors[naming.hit_x], len(z), naming.hit_x, where).double().numpy()
        y = _rows(tensors[naming.hit_y], len(z), naming.hit_y, where).double().numpy()
    else:
        r = _rows(_required(tensors, naming.hit_r, where), len(z), naming.hit_r, where)
        phi = _rows(_required(tensors, naming.hit_phi, where), len(z), naming.hit_phi, where)
        r, phi = r.double().numpy(), phi.double().numpy()
        x, y = r * np.cos(phi), r * np.sin(phi)
    xyz = np.stack([x, y, z], axis=1)
    if not np.isfinite(xyz).all():
        raise InputError(f"{where}: hit coordinates hold NaN or inf")
    return xyz


def _hit_truth(
    tensors: dict[str, torch.Tensor], naming: Naming, n_nodes: int, pt_unit: str, where: str
) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """Particle id and pT [GeV] of each hit, from its track edges (0 for hits on none)."""
    if pt_unit not in PT_UNITS:
        raise InputError(f"pT unit {pt_unit!r}: expected one of {', '.join(PT_UNITS)}")
    track_edges = _required(tensors, "track_edges", where).long()
    if track_edges.dim() != 2 or track_edges.shape[0] != 2:
        raise InputError(
            f"{where}: track_edges must have shape (2, T), got {tuple(track_edges.shape)}"
        )
    n_tracks = track_edges.shape[1]
    _check_indices(track_edges, n_nodes, "track_edges", where)
    pid = _rows(
        _required(tensors, naming.track_particle_id, where), n_tracks, naming.track_particle_id,
        where,
    ).long().numpy()  # fmt: skip
    pt = _rows(
        _required(tensors, naming.track_particle_pt, where), n_tracks, naming.track_particle_pt,
        where,
    ).double().numpy() * PT_UNITS[pt_unit]  # fmt: skip
    particle_id = np.zeros(n_nodes, dtype=np.int64)
    particle_pt = np.zeros(n_nodes, dtype=np.float64)
    for side in (0, 1):
        nodes = track_edges[side].numpy()
        particle_id[nodes] = pid
        particle_pt[nodes] = pt
    if naming.hit_particle_id and naming.hit_particle_id in tensors:
        particle_id = _rows(
            tensors[naming.hit_particle_id], n_nodes, naming.hit_particle_id, where
        ).long().numpy()  # fmt: skip
    missing = 0
    if naming.track_to_edge_map in tensors:
        mapping = _rows(
            tensors[naming.track_to_edge_map], n_tracks, naming.track_to_edge_map, where
        ).long()  # fmt: skip
        n_edges = int(tensors["edge_index"].shape[1])
        _check_indices(mapping, n_edges, naming.track_to_edge_map, where, low=-1)
        missing = int((mapping < 0).sum())
    return particle_id, particle_pt, {"n_track_edges": n_tracks, "track_edges_missing": missing}
