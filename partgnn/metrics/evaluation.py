"""Evaluation of a scores file: edge metrics and track metrics over all its events.

Edge counts add up over events (the AUC is computed over all edges together); track metrics are
computed per event and combined; boundary edges are those the given shards' partition cuts, and
track efficiency is also split between particles whose hits span several of its sectors and
particles inside one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
from torch_geometric.data import Data

from partgnn.data.event import Event
from partgnn.data.files.h5_files import file_sha256
from partgnn.data.files.storage import EventFile, GraphFile, ScoresFile
from partgnn.errors import InputError
from partgnn.metrics.construction import (
    ConstructionMetrics,
    construction_counts,
    construction_summary,
)
from partgnn.metrics.edge_counts import SCORE_CUT
from partgnn.metrics.edge_metrics import EdgeMetrics, edge_metrics, roc_auc
from partgnn.metrics.efficiency_tallies import EfficiencyTallies
from partgnn.metrics.evaluation_results import EvaluationResults
from partgnn.metrics.track_building import build_tracks
from partgnn.metrics.track_matching import match_tracks
from partgnn.metrics.tracks import TrackMetrics, count_tracks, track_metrics
from partgnn.partition.shard_reader import ShardDirectory, cut_edges, node_parts


def evaluate_scores(
    scores_path: Path,
    graphs_path: Path,
    *,
    events_path: Path | None = None,
    shards_path: Path | None = None,
    cut: float | None = None,
    pt_min: float = 1.0,
    event_ids: list[int] | None = None,
    pt_max: float | None = None,
    cut_at_efficiency: float | None = None,
    track_building: str = "components",
    cut_at_impure_rate: float | None = None,
    tallies: EfficiencyTallies | None = None,
) -> EvaluationResults:
    """Edge and track metrics of a scores file over all its events.

    Edge counts add up over events (AUC over all edges together); track metrics add up their
    counts over events; the TrackML score is the mean over events (needs ``events_path``), and
    so is ``construction``: the fraction of the events' target doublets the graphs hold
    (:mod:`partgnn.metrics.construction`; None without events).
    ``event_ids`` restricts the evaluation to those events (e.g. the validation events).
    Target particles (the target edge efficiency and the track efficiency) have
    ``pt_min < pT`` (and ``pT <= pt_max`` when given: a band, e.g. 0.5-1 GeV).
    ``cut`` defaults to the cut the model's training chose on its validation events (recorded
    by ``partgnn infer`` in the scores file), else :data:`SCORE_CUT`; ``cut_at_efficiency``
    instead chooses it on these events: the highest cut keeping that fraction of their target
    edges (:func:`cut_for_target_efficiency`), e.g. on validation events, for the test events;
    ``cut_at_impure_rate`` the lowest cut at which at most that fraction of their tracks are
    impure (:func:`cut_for_impure_rate`). Tracks are built by ``track_building``
    (:data:`~partgnn.metrics.track_building.TRACK_BUILDING_METHODS`). ``tallies``, when
    given, collects every target edge, target particle and candidate track counted, for
    plots (:mod:`partgnn.metrics.efficiency_tallies`).

    Raises:
        InputError: If the scores were made from another graphs file, events are missing,
            ``event_ids`` names an event twice, or the pT band is empty.
    """
    if pt_max is not None and pt_max <= pt_min:
        raise InputError(
            f"--pt-max {pt_max:g} is not above --pt-min {pt_min:g}: the band of target pT "
            "(pt_min < pT <= pt_max) holds no particle"
        )
    if event_ids is not None and len(set(event_ids)) != len(event_ids):
        repeated = sorted({e for e in event_ids if event_ids.count(e) > 1})
        raise InputError(
            f"event ids: {', '.join(map(str, repeated))} given more than once (each event "
            "counts once)"
        )
    with ScoresFile(scores_path) as scores_file, GraphFile(graphs_path) as graphs:
        graphs_sha256 = file_sha256(graphs_path)
        if scores_file.attrs.get("source_sha256") != graphs_sha256:
            raise InputError(
                f"{scores_path}: scores were made from another file than {graphs_path}"
            )
        cut_source = "given"
        if cut_at_efficiency is not None:
            cut = cut_for_target_efficiency(
                scores_path,
                graphs_path,
                cut_at_efficiency,
                pt_min=pt_min,
                pt_max=pt_max,
                event_ids=event_ids,
            )
            cut_source = f"target edge efficiency {cut_at_efficiency:g} on these events"
        elif cut_at_impure_rate is not None:
            cut, reached = cut_for_impure_rate(
                scores_path,
                graphs_path,
                cut_at_impure_rate,
                track_building=track_building,
                event_ids=event_ids,
            )
            cut_source = (
                f"impure track rate {reached:.4g} (at most {cut_at_impure_rate:g}) on these events"
            )
        elif cut is None:
            recorded = scores_file.attrs.get("score_cut")
            cut, cut_source = (
                (float(recorded), "chosen in training")
                if recorded is not None
                else (SCORE_CUT, "the default: the scores record no cut chosen in training")
            )
        if cut_at_efficiency is not None or cut_at_impure_rate is not None:
            lowest = _lowest_score(scores_file, event_ids)
            if lowest is not None and lowest > cut:
                cut_source += (
                    f"; it keeps every edge (the lowest score is {lowest:.4g}): at this target "
                    "the scores select nothing"
                )
        shards = ShardDirectory(shards_path) if shards_path is not None else None
        if shards is not None:
            shards.check_source(graphs_path, graphs_sha256)
        events = EventFile(events_path) if events_path is not None else None
        if events is not None:
            _check_events_source(graphs, events_path)
        event_index = {eid: i for i, eid in enumerate(events.event_ids)} if events else {}
        all_scores, all_y, edge_rows, track_rows = [], [], [], []
        construction_rows: list[ConstructionMetrics] = []
        for event_id, graph, scores in _scored_events(scores_file, graphs, event_ids):
            y = graph.y.numpy()
            boundary, hit_sector = None, None
            if shards is not None:
                if event_id not in shards.meta.event_ids:
                    raise InputError(f"{shards_path}: no event {event_id}")
                shard_index = shards.meta.event_ids.index(event_id)
                boundary = cut_edges(shards, shard_index, y.shape[0])
                hit_sector = node_parts(shards, shard_index, graph.num_nodes)
            particle_id = graph.particle_id.numpy()
            particle_pt = graph.particle_pt.numpy()
            hit_weight, n_hits = None, None
            if events is not None:
                if event_id not in event_index:
                    raise InputError(f"{events_path}: no event {event_id}")
                event = events[event_index[event_id]]
                hit_weight, n_hits = _truth_of(event, graph)
                construction_rows.append(construction_counts(event, graph, pt_min, pt_max))
            target = target_edges(
                graph.edge_index.numpy(), y, particle_id, particle_pt, pt_min, pt_max
            )
            edge_rows.append(edge_metrics(scores, y, boundary=boundary, target=target, cut=cut))
            labels = build_tracks(
                graph.edge_index.numpy(), scores, graph.num_nodes, cut=cut, method=track_building
            )
            matching = match_tracks(
                labels, particle_id, particle_pt=particle_pt, pt_min=pt_min, pt_max=pt_max,
                particle_n_hits=n_hits,
            )  # fmt: skip
            track_rows.append(count_tracks(matching, hit_weight=hit_weight, hit_sector=hit_sector))
            if tallies is not None:
                tallies.add_event(graph, scores, cut, target, matching)
            all_scores.append(scores)
            all_y.append(y)
    edge = EdgeMetrics(
        **{
            **_sum_edge_rows(edge_rows),
            "auc": roc_auc(np.concatenate(all_scores), np.concatenate(all_y)),
        }
    )
    return EvaluationResults(
        scores=str(scores_path),
        graphs=str(graphs_path),
        events=len(edge_rows),
        cut=cut,
        cut_source=cut_source,
        track_building=track_building,
        target_pt=(pt_min, pt_max),
        edge=edge,
        track=TrackMetrics.combine(track_rows),
        construction=construction_summary(construction_rows),
    )


def cut_for_target_efficiency(
    scores_path: Path,
    graphs_path: Path,
    efficiency: float,
    *,
    pt_min: float = 1.0,
    pt_max: float | None = None,
    event_ids: list[int] | None = None,
) -> float:
    """The highest score cut at which at least ``efficiency`` of the target edges of these
    events (pooled) pass (an edge passes when its score is above the cut).

    Raises:
        InputError: The events have no target edges, or ``efficiency`` is not in (0, 1].
    """
    if not 0.0 < efficiency <= 1.0:
        raise InputError(f"target edge efficiency must be in (0, 1] (got {efficiency:g})")
    with ScoresFile(scores_path) as scores_file, GraphFile(graphs_path) as graphs:
        target_scores = [
            scores[
                target_edges(
                    graph.edge_index.numpy(),
                    graph.y.numpy(),
                    graph.particle_id.numpy(),
                    graph.particle_pt.numpy(),
                    pt_min,
                    pt_max,
                )
            ]
            for _, graph, scores in _scored_events(scores_file, graphs, event_ids)
        ]
    ordered = np.sort(np.concatenate(target_scores)).astype(np.float32)
    if ordered.size == 0:
        raise InputError(f"{scores_path}: no target edges to choose a cut on")
    # At most `allowed` target edges may fail (score <= cut): the cut sits just below the
    # (allowed + 1)-th lowest score.
    allowed = int(np.floor((1.0 - efficiency) * ordered.size + 1e-9))
    if allowed >= ordered.size:
        return 1.0
    return float(np.nextafter(ordered[allowed], np.float32(-np.inf)))


#: How close :func:`cut_for_impure_rate` brings its cut to the lowest one: bisection steps on
#: (0, 1) until the interval is this narrow (10 steps).
IMPURE_CUT_TOLERANCE = 1e-3


def cut_for_impure_rate(
    scores_path: Path,
    graphs_path: Path,
    rate: float,
    *,
    track_building: str = "components",
    event_ids: list[int] | None = None,
    tolerance: float = IMPURE_CUT_TOLERANCE,
) -> tuple[float, float]:
    """The lowest score cut at which at most ``rate`` of these events' tracks (pooled) are
    impure (no particle holds more than half of a track's hits), to within ``tolerance``, and
    the impure rate it reaches.

    Found by bisection on (0, 1): a higher cut lets fewer wrong edges join tracks, so the
    impure rate falls as the cut rises (not strictly from event to event: the bisection finds
    a cut where the rate crosses ``rate``, the lowest one where it crosses once). Tracks are
    built by ``track_building``; no track at all counts as no impure track.

    Raises:
        InputError: ``rate`` is not in [0, 1), or the tracks are impure above it even at the
            highest cut tried.
    """
    if not 0.0 <= rate < 1.0:
        raise InputError(f"impure track rate must be in [0, 1) (got {rate:g})")
    with ScoresFile(scores_path) as scores_file, GraphFile(graphs_path) as graphs:
        events = [
            (graph.edge_index.numpy(), graph.num_nodes, graph.particle_id.numpy(), scores)
            for _, graph, scores in _scored_events(scores_file, graphs, event_ids)
        ]

    def impure_rate(cut: float) -> float:
        rows = [
            track_metrics(
                build_tracks(edges, scores, n_nodes, cut=cut, method=track_building), particle_id
            )
            for edges, n_nodes, particle_id, scores in events
        ]
        combined = TrackMetrics.combine(rows)
        return combined.n_impure_tracks / combined.n_tracks if combined.n_tracks else 0.0

    low, high = 0.0, 1.0 - tolerance
    reached = impure_rate(high)
    if reached > rate:
        raise InputError(
            f"{scores_path}: tracks are more than {rate:g} impure even at cut {high:g}"
        )
    while high - low > tolerance:
        middle = 0.5 * (low + high)
        middle_rate = impure_rate(middle)
        if middle_rate <= rate:
            high, reached = middle, middle_rate
        else:
            low = middle
    return float(high), reached


def _lowest_score(scores_file: ScoresFile, event_ids: list[int] | None) -> float | None:
    """The lowest edge score of the selected events (``None``: no edge)."""
    selected = set(scores_file.event_ids if event_ids is None else event_ids)
    lowest = [
        float(scores.min())
        for index, event_id in enumerate(scores_file.event_ids)
        if event_id in selected and (scores := scores_file[index]).size
    ]
    return min(lowest) if lowest else None


def _scored_events(
    scores_file: ScoresFile, graphs: GraphFile, event_ids: list[int] | None
) -> Iterator[tuple[int, Data, np.ndarray]]:
    """``(event_id, graph, scores)`` of the selected events (all scored ones by default).

    Raises:
        InputError: An event is not scored or not in the graphs, or its scores do not fit.
    """
    selected = scores_file.event_ids if event_ids is None else event_ids
    unknown = sorted(set(selected) - set(scores_file.event_ids))
    if unknown:
        raise InputError(f"{scores_file.path}: no scores for event {unknown[0]}")
    score_index = {eid: i for i, eid in enumerate(scores_file.event_ids)}
    graph_index = {eid: i for i, eid in enumerate(graphs.event_ids)}
    for event_id in selected:
        if event_id not in graph_index:
            raise InputError(f"{graphs.path}: no event {event_id} (scored in {scores_file.path})")
        graph = graphs[graph_index[event_id]]
        scores = scores_file[score_index[event_id]]
        if scores.shape != graph.y.shape:
            raise InputError(
                f"{scores_file.path}: event {event_id} has {scores.shape[0]} scores for "
                f"{graph.y.shape[0]} edges"
            )
        yield event_id, graph, scores


def target_edges(
    edge_index: np.ndarray,
    y: np.ndarray,
    particle_id: np.ndarray,
    pt: np.ndarray,
    pt_min: float,
    pt_max: float | None = None,
) -> np.ndarray:
    """True edges whose particle has pT > pt_min (and <= pt_max) and >= 3 hits in the graph."""
    _, inverse, counts = np.unique(particle_id, return_inverse=True, return_counts=True)
    hits_of_node = counts[inverse]
    source = edge_index[0]
    target = (
        (y > 0.5) & (particle_id[source] > 0) & (pt[source] > pt_min) & (hits_of_node[source] >= 3)
    )
    if pt_max is not None:
        target &= pt[source] <= pt_max
    return target


def _check_events_source(graphs: GraphFile, events_path: Path) -> None:
    """The graphs were built from the events file ``events_path`` (by its checksum)."""
    expected = graphs.attrs.get("source_sha256")
    if graphs.attrs.get("source_format") != "partgnn-events" or expected is None:
        return  # graphs built another way name no events file to compare with
    if file_sha256(events_path) != expected:
        raise InputError(
            f"{events_path}: not the events file {graphs.path} was built from "
            f"(that was {graphs.attrs.get('source_file')})"
        )


def _truth_of(event: Event, graph: Data) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """Truth weight of each graph node's hit, and each particle's hits in the event.

    A particle's hits are counted from the event's truth rows (the hits present), not from the
    particles table's ``nhits``: in a subsampled event (one detector region, a pT selection)
    ``nhits`` counts the hits of the whole original event, which no track could reach.

    Returns:
        ``weights (N,)`` and ``(particle_ids (P,), hit_counts (P,))``.
    """
    truth = event.truth.set_index("hit_id")
    weights = truth.loc[graph.hit_id.numpy(), "weight"].to_numpy(dtype=np.float64)
    particle_ids, counts = np.unique(
        event.truth["particle_id"].to_numpy(dtype=np.int64), return_counts=True
    )
    return weights, (particle_ids, counts)


def _sum_edge_rows(rows: list[dict[str, float]]) -> dict[str, float]:
    """Event-averaged edge metrics (NaN-aware) and summed edge counts."""
    keys = rows[0].keys() if rows else ()
    out = {}
    for key in keys:
        values = np.array([row[key] for row in rows], dtype=np.float64)
        if key.startswith("n_") or key.endswith("_edges"):
            out[key] = float(values.sum())
        else:
            out[key] = float(np.nanmean(values)) if np.isfinite(values).any() else float("nan")
    return out
