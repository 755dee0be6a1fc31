"""Distributed inference: edge scores of every event, in the global edge order of its graph.

Each rank computes what its mode's strategy computes in training, on the same source
(:mod:`partgnn.train.items`): by default the partitioned forward pass with halo exchange on
its shard; the scores of the edges each rank counts are summed into an ``(E,)`` vector with one
all-reduce (each edge is counted by at most one rank, the others contribute 0), and the main rank
writes them. A single process can also score whole graphs from a graphs file (mode ``full``).
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

from partgnn.data.files.h5_files import file_sha256
from partgnn.data.files.storage import GraphFile
from partgnn.data.files.writers import write_scores
from partgnn.data.graphs.graph_construction import construction_mismatch, graph_construction
from partgnn.distributed.communication_counter import CommunicationCounter
from partgnn.distributed.context import DistContext
from partgnn.errors import InputError
from partgnn.models.build import build_model
from partgnn.models.config import ModelConfig
from partgnn.partition.shard_reader import ShardDirectory
from partgnn.resources import pretrained_name
from partgnn.train.config.config_file import validate_config
from partgnn.train.config.sections import DataConfig, RunConfig, TrainConfig
from partgnn.train.run_directory.saved_model import SavedModel
from partgnn.train.step import edge_logits
from partgnn.train.strategies import Strategy, mode_facts, strategy_for


def load_trained_model(
    checkpoint: str | os.PathLike[str],
    node_features: int,
    edge_features: int,
    device: torch.device,
    *,
    model_target: str | None = None,
    saved: SavedModel | None = None,
) -> tuple[torch.nn.Module, torch.dtype]:
    """The model of a training checkpoint, in eval mode, and the dtype it was trained in.

    A checkpoint of a model class of one's own records it (``model.target``); importing it runs
    that module's code, so it is imported only when the caller names the same class in
    ``model_target`` (``partgnn infer --model-target``), never because a checkpoint says so.
    ``saved``: the checkpoint when the caller has read it already (else it is read).

    Raises:
        InputError: If the checkpoint is unreadable, names a model class the caller did not,
            or its weights do not fit the data.
    """
    saved = SavedModel.read(checkpoint, device) if saved is None else saved
    model_config = saved.model_config()
    dtype = saved.dtype()
    check_model_target(checkpoint, model_config.target, model_target)
    model = build_model(model_config, node_features, edge_features).to(device=device, dtype=dtype)
    try:
        missing, unexpected = model.load_state_dict(saved.weights, strict=False)
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


def scoring_strategy(
    mode: str,
    context: DistContext,
    *,
    shards: str | os.PathLike[str] | None = None,
    graphs: str | os.PathLike[str] | None = None,
    transport: str = "auto",
    model: ModelConfig | None = None,
    features: dict[str, Any] | None = None,
) -> Strategy:
    """The strategy of ``mode`` on these shards (or graphs file), as scoring runs it: its
    source is the one training reads (:mod:`partgnn.train.items`), with the exchange hidden
    behind the interior edges in modes that exchange.

    Raises:
        InputError: Unknown mode, or the data do not fit it or the launched processes.
    """
    config = TrainConfig(
        mode=mode,
        data=DataConfig(
            graphs=None if graphs is None else os.fspath(graphs),
            shards=None if shards is None else os.fspath(shards),
            **(features or {}),
        ),
        model=model or ModelConfig(),
        run=RunConfig(transport=transport, hide_communication=True),
    )
    validate_config(config, f"infer --mode {mode}")
    return strategy_for(config, context, CommunicationCounter())


@torch.no_grad()
def score_events(
    checkpoint: str | os.PathLike[str],
    strategy: Strategy,
    *,
    model_target: str | None = None,
    saved: SavedModel | None = None,
) -> Iterator[tuple[int, np.ndarray | None]]:
    """Yields ``(event_id, scores (E,))`` per event in the global edge order of its graph;
    the scores only on the graph group's rank 0.

    Each rank computes what ``strategy``'s mode computes in training (its source's items) and
    scores the edges it counts there: halo, the edges it owns with the exchange (the full
    graph's scores); naive, its sector's interior edges alone (the edges crossing the
    boundary are never scored and get score 0); overlapping, the edges into its owned nodes on
    its extended sector; full, every edge. Each edge is counted by at most one rank of a
    group: one all-reduce sums them.

    A collective per event in the modes of several ranks: every rank of the group must
    iterate to the end. ``saved``: the checkpoint when the caller has read it.
    """
    context = strategy.context
    source = strategy.make_source()
    try:
        model = dtype = None
        for index in range(len(source)):
            item = source.item(index, edge_ids=True)
            if model is None:
                model, dtype = load_trained_model(
                    checkpoint, item.x.shape[1], item.edge_attr.shape[1], context.device,
                    model_target=model_target, saved=saved,
                )  # fmt: skip
            logits = edge_logits(model, item, dtype)
            scores = torch.zeros(
                source.event_size(index), dtype=torch.float64, device=context.device
            )
            scores[item.select_counted(item.edge_ids)] = torch.sigmoid(
                item.select_counted(logits)
            ).to(torch.float64)
            if context.group_size > 1:
                dist.all_reduce(scores, group=context.group)
            yield item.event_id, (scores.cpu().numpy() if context.group_rank == 0 else None)
    finally:
        source.close()


def score_graphs(
    checkpoint: str | os.PathLike[str],
    graphs_path: str | os.PathLike[str],
    device: torch.device,
    *,
    model_target: str | None = None,
) -> Iterator[tuple[int, np.ndarray]]:
    """Yields ``(event_id, scores (E,))`` of whole event graphs, in this one process (mode
    ``full``; ``model_target``: see :func:`load_trained_model`)."""
    context = DistContext.one_process(device)
    saved = SavedModel.read(checkpoint)
    strategy = scoring_strategy(
        "full", context, graphs=graphs_path, model=saved.model_config(),
        features=saved.input_columns(),
    )  # fmt: skip
    scored = score_events(checkpoint, strategy, model_target=model_target, saved=saved)
    for event_id, scores in scored:
        assert scores is not None  # one process: its rank 0
        yield event_id, scores


def run_inference(
    checkpoint: str | os.PathLike[str],
    out: str | os.PathLike[str],
    context: DistContext,
    *,
    shards: str | os.PathLike[str] | None = None,
    graphs: str | os.PathLike[str] | None = None,
    mode: str | None = None,
    transport: str = "auto",
    model_target: str | None = None,
) -> int:
    """Scores every event of a shard directory (or graphs file) and writes ``out`` (rank 0).

    Args:
        mode: How each rank computes (:func:`score_events`): a mode that reads shards for
            ``shards`` (default ``halo``), one that reads a graphs file for ``graphs``
            (default ``full``).
        model_target: Allows the checkpoint's own model class (:func:`load_trained_model`).

    Returns:
        The number of events scored.
    """
    if (shards is None) == (graphs is None):
        raise InputError("infer: give exactly one of --shards and --graphs")
    mode = mode or ("halo" if shards is not None else "full")
    facts = mode_facts(mode, "infer --mode")
    if facts.reads_shards != (shards is not None):
        wanted = "--shards" if facts.reads_shards else "--graphs"
        raise InputError(f"infer --mode {mode} scores the events of {wanted}")
    if shards is not None:
        directory = ShardDirectory(shards)
        graphs_path, given = Path(directory.meta.source.path), shards
    else:
        if context.global_world_size != 1:
            raise InputError("infer --graphs runs in one process; use --shards for several ranks")
        graphs_path, given = Path(graphs), graphs
    # What the checkpoint records beside its weights: the score cut training chose on its
    # validation events, and (shipped models) the graph construction it expects.
    saved = SavedModel.read(checkpoint)
    if context.is_main:
        warn_on_other_construction(saved.construction, checkpoint, graphs_path, given)
    strategy = scoring_strategy(
        mode, context, shards=shards, graphs=graphs, transport=transport,
        model=saved.model_config(), features=saved.input_columns(),
    )  # fmt: skip
    items = score_events(checkpoint, strategy, model_target=model_target, saved=saved)
    if shards is not None:
        source = {
            "source_shards": str(Path(shards).resolve()),
            "mode": strategy.name,
            "sector_margin": strategy.sector_margin,
            **_source(directory),
        }
    else:
        source = {
            "source_file": str(Path(graphs).resolve()),
            "source_sha256": file_sha256(graphs),
        }
    # A shipped model is recorded by its name (its file lies inside the installation).
    named = pretrained_name(checkpoint) is not None
    provenance = {"checkpoint": os.fspath(checkpoint) if named else str(Path(checkpoint).resolve()),
                  **source}  # fmt: skip
    if saved.score_cut is not None:
        provenance["score_cut"] = saved.score_cut
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
        "source_file": str(directory.meta.source.path),
        "source_sha256": directory.source_sha256,
    }
