"""Distributed inference: edge scores of every event, in the global edge order of its graph.

Each rank of a graph-parallel group runs the partitioned forward pass (with halo exchange) on its
shard; the scores of the edges each rank owns are summed into an ``(E,)`` vector with one
all-reduce (each edge is owned by exactly one rank, the others contribute 0), and the main rank
writes them. A single process can also score whole graphs from a graphs file.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch_geometric.data import Data

from partgnn.data.graph_construction import construction_mismatch, graph_construction
from partgnn.data.h5_files import file_sha256
from partgnn.data.storage import GraphFile, write_scores
from partgnn.distributed.context import DistContext
from partgnn.distributed.halo_exchange import HaloExchanger
from partgnn.errors import InputError, first_line
from partgnn.models.build import build_model
from partgnn.partition.shard_reader import RankEvent, ShardDirectory
from partgnn.resources import pretrained_name
from partgnn.train.checkpoints import load_checkpoint
from partgnn.train.group_shards import open_group_shard
from partgnn.train.loss import DTYPES
from partgnn.train.model_settings import saved_model_config


def load_trained_model(
    checkpoint: str | os.PathLike[str],
    node_features: int,
    edge_features: int,
    device: torch.device,
    *,
    model_target: str | None = None,
) -> tuple[torch.nn.Module, torch.dtype]:
    """The model of a training checkpoint, in eval mode, and the dtype it was trained in.

    A checkpoint of a model class of one's own records it (``model.target``); importing it runs
    that module's code, so it is imported only when the caller names the same class in
    ``model_target`` (``partgnn infer --model-target``), never because a checkpoint says so.

    Raises:
        InputError: If the checkpoint is unreadable, names a model class the caller did not,
            or its weights do not fit the data.
    """
    state = load_checkpoint(checkpoint, device)
    model_config = saved_model_config(state, str(checkpoint))
    try:
        dtype = DTYPES[state["config"]["run"]["dtype"]]
    except (KeyError, TypeError) as err:
        raise InputError(f"{checkpoint}: no readable run dtype ({first_line(err)})") from None
    check_model_target(checkpoint, model_config.target, model_target)
    model = build_model(model_config, node_features, edge_features).to(device=device, dtype=dtype)
    try:
        missing, unexpected = model.load_state_dict(state["model"], strict=False)
    except RuntimeError as err:
        raise InputError(
            f"{checkpoint}: weights do not fit {node_features} node and {edge_features} edge "
            f"features ({str(err).splitlines()[0]})"
        ) from None
    # Checkpoints from before input standardisation have no scaler: their model was trained on
    # raw inputs, which the scaler's identity default reproduces.
    missing = [key for key in missing if not key.startswith("input_scaler.")]
    if missing or unexpected:
        raise InputError(
            f"{checkpoint}: not a checkpoint of this model "
            f"({'missing' if missing else 'unexpected'} weights {(missing or unexpected)[0]!r})"
        )
    model.eval()
    return model, dtype


def check_model_target(
    checkpoint: str | os.PathLike[str], recorded: str | None, named: str | None
) -> None:
    """Refuses a checkpoint whose model class (``recorded``) is not the one the user ``named``.

    Raises:
        InputError: One line saying which class and how to allow it.
    """
    if recorded is None and named is not None:
        raise InputError(
            f"{checkpoint}: --model-target {named} given, but the checkpoint holds partgnn's "
            "own model"
        )
    if recorded is not None and recorded != named:
        raise InputError(
            f"{checkpoint}: the model is the class {recorded} (model.target); importing it "
            f"runs that module's code, so it is imported only when named: pass --model-target "
            f"{recorded}" + (f" (got {named})" if named else "")
        )


@torch.no_grad()
def score_shards(
    checkpoint: str | os.PathLike[str],
    shards: ShardDirectory,
    context: DistContext,
    *,
    transport: str = "auto",
    naive: bool = False,
    model_target: str | None = None,
) -> Iterator[tuple[int, np.ndarray | None]]:
    """Yields ``(event_id, scores (E,))`` per event; the scores only on the group's rank 0.

    With ``naive``, every rank scores its sector alone, as sector-based pipelines do: the
    naive sector (owned nodes and interior edges; edges crossing the boundary are never scored
    and get score 0), or, when the shards store extended sectors (``partition --margin K``),
    the overlapping sector of K hops, which scores the edges into its owned nodes.

    A collective per event: every rank of the group must iterate to the end.
    """
    with open_group_shard(shards, context) as shard:
        model = None
        for index in range(len(shard)):
            event = shard[index]
            graph = event.graph
            if model is None:
                model, dtype = load_trained_model(
                    checkpoint, graph.x.shape[1], graph.edge_attr.shape[1], context.device,
                    model_target=model_target,
                )  # fmt: skip
            if naive and event.sector is not None:
                owned_ids, owned_scores = _score_sector(model, dtype, event.sector, context)
            else:
                owned_ids, owned_scores = _score_plan(
                    model, dtype, event, context, transport=transport, naive=naive
                )
            scores = torch.zeros(event.n_global_edges, dtype=torch.float64, device=context.device)
            scores[owned_ids] = owned_scores
            if context.world_size > 1:
                dist.all_reduce(scores, group=context.group)
            yield event.event_id, (scores.cpu().numpy() if context.rank == 0 else None)


def _score_plan(
    model: torch.nn.Module,
    dtype: torch.dtype,
    event: RankEvent,
    context: DistContext,
    *,
    transport: str,
    naive: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Global ids ``(E_owned,)`` and float64 scores of the edges a rank's plan owns: with the
    halo exchange, or (``naive``) on its interior edges alone."""
    graph, plan = event.graph, event.plan
    edges = torch.ones(plan.n_local_edges, dtype=torch.bool)
    exchange = None
    if naive:
        edges = torch.from_numpy(plan.interior_edges)
    else:
        exchange = HaloExchanger.for_plan(plan, context, transport=transport, overlap=True)
    logits = torch.zeros(plan.n_local_edges, dtype=dtype, device=context.device)
    logits[edges.to(context.device)] = model(
        graph.x[: plan.n_owned if naive else None].to(context.device, dtype),
        graph.edge_index[:, edges].to(context.device),
        graph.edge_attr[edges].to(context.device, dtype),
        exchange=exchange,
    )
    owned = torch.from_numpy(plan.edge_owned & edges.numpy()).to(context.device)
    ids = torch.from_numpy(plan.edge_ids).to(context.device)[owned]
    return ids, torch.sigmoid(logits[owned]).to(torch.float64)


def _score_sector(
    model: torch.nn.Module, dtype: torch.dtype, sector: Data, context: DistContext
) -> tuple[torch.Tensor, torch.Tensor]:
    """Global ids ``(E_owned,)`` and float64 scores of the edges into an overlapping sector's
    owned nodes, computed on the sector alone (no exchange)."""
    device = context.device
    logits = model(
        sector.x.to(device, dtype),
        sector.edge_index.to(device),
        sector.edge_attr.to(device, dtype),
    )
    owned = sector.edge_owned.to(device)
    return sector.global_edges.to(device)[owned], torch.sigmoid(logits[owned]).to(torch.float64)


@torch.no_grad()
def score_graphs(
    checkpoint: str | os.PathLike[str],
    graphs_path: str | os.PathLike[str],
    device: torch.device,
    *,
    model_target: str | None = None,
) -> Iterator[tuple[int, np.ndarray]]:
    """Yields ``(event_id, scores (E,))`` of whole event graphs, in one process
    (``model_target``: see :func:`load_trained_model`)."""
    with GraphFile(graphs_path) as graphs:
        model = None
        for graph in graphs:
            if model is None:
                model, dtype = load_trained_model(
                    checkpoint, graph.x.shape[1], graph.edge_attr.shape[1], device,
                    model_target=model_target,
                )  # fmt: skip
            logits = model(
                graph.x.to(device, dtype),
                graph.edge_index.to(device),
                graph.edge_attr.to(device, dtype),
            )
            yield int(graph.event_id), torch.sigmoid(logits).to(torch.float64).cpu().numpy()


def run_inference(
    checkpoint: str | os.PathLike[str],
    out: str | os.PathLike[str],
    context: DistContext,
    *,
    shards: str | os.PathLike[str] | None = None,
    graphs: str | os.PathLike[str] | None = None,
    transport: str = "auto",
    naive: bool = False,
    model_target: str | None = None,
) -> int:
    """Scores every event of a shard directory (or graphs file) and writes ``out`` (rank 0).
    ``model_target`` allows the checkpoint's own model class (:func:`load_trained_model`).

    Returns:
        The number of events scored.
    """
    if (shards is None) == (graphs is None):
        raise InputError("infer: give exactly one of --shards and --graphs")
    if naive and shards is None:
        raise InputError("infer --naive scores the sectors of a shard directory: give --shards")
    if shards is not None:
        directory = ShardDirectory(shards, world_size=context.world_size)
        graphs_path, given = Path(directory.meta["source"]["path"]), shards
    else:
        if context.world_size != 1:
            raise InputError("infer --graphs runs in one process; use --shards for several ranks")
        graphs_path, given = Path(graphs), graphs
    # What the checkpoint records beside its weights: the score cut training chose on its
    # validation events, and (shipped models) the graph construction it expects.
    saved = load_checkpoint(checkpoint)
    if context.is_main:
        warn_on_other_construction(saved.get("construction"), checkpoint, graphs_path, given)
    if shards is not None:
        items = score_shards(
            checkpoint, directory, context, transport=transport, naive=naive,
            model_target=model_target,
        )  # fmt: skip
        source = {
            "source_shards": str(Path(shards).resolve()),
            "naive_sectors": naive,
            "sector_margin": int(directory.meta.get("margin", 0)) if naive else 0,
            **_source(directory),
        }
    else:
        items = score_graphs(checkpoint, graphs, context.device, model_target=model_target)
        source = {
            "source_file": str(Path(graphs).resolve()),
            "source_sha256": file_sha256(graphs),
        }
    # A shipped model is recorded by its name (its file lies inside the installation).
    named = pretrained_name(checkpoint) is not None
    provenance = {"checkpoint": os.fspath(checkpoint) if named else str(Path(checkpoint).resolve()),
                  **source}  # fmt: skip
    if saved.get("score_cut") is not None:
        provenance["score_cut"] = float(saved["score_cut"])
    if not context.is_main:
        for _ in items:  # take part in the collectives; rank 0 writes
            pass
        return 0
    return write_scores(out, ((event_id, s) for event_id, s in items), provenance=provenance)


def warn_on_other_construction(
    expected: dict[str, Any] | None,
    checkpoint: str | os.PathLike[str],
    graphs_path: Path,
    given: str | os.PathLike[str],
) -> None:
    """Prints one warning line when the checkpoint names the graph construction it expects
    (``expected``: shipped models record their card's ``construction``) and the graphs
    ``given`` (a graphs file, or shards of ``graphs_path``) were built another way; says nothing
    otherwise (a checkpoint naming none, or shards whose graphs file is gone)."""
    if not expected or not graphs_path.is_file():
        return
    with GraphFile(graphs_path) as graph_file:
        mismatch = construction_mismatch(expected, graph_construction(graph_file.attrs))
    if mismatch is not None:
        name = pretrained_name(checkpoint)
        how = f" (partgnn pretrained pretrained:{name} shows how to build them)" if name else ""
        print(
            f"partgnn: warning: {given}: {mismatch}{how}; its scores will be far from what "
            "it does on its own graphs",
            file=sys.stderr,
        )


def _source(directory: ShardDirectory) -> dict[str, str]:
    return {
        "source_file": str(directory.meta["source"]["path"]),
        "source_sha256": directory.source_sha256,
    }
