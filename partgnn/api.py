"""The Python API: partition an event, build its exchange, run a model on a partition, train.

Everything here is also reachable as ``partgnn.NAME`` (imported on first use, so that
``import partgnn`` stays instant). A graph-parallel script runs on every rank of a launcher
(``torchrun``, ``mpirun``, ``srun``); each rank takes its own part of the same event::

    import partgnn

    context = partgnn.init_distributed(device="auto")        # one rank per part
    graph = ...                                               # a torch_geometric Data, whole event
    plans = partgnn.partition_event(graph, context.group_size, method="metis")
    part = partgnn.local_graph(graph, plans[context.group_rank])    # owned + halo rows, local edges
    exchange = partgnn.make_exchange(plans[context.group_rank], context)
    logits = model(part.x, part.edge_index, part.edge_attr, exchange=exchange)  # (E_local,)
    loss = partgnn.owned_edge_loss(logits, part, pos_weight=3.0)  # the event's whole sum / count
    loss.backward()                                           # the exchange's backward runs too
    partgnn.sum_gradients(model, context)                     # = the whole-graph gradient

Training from a config object instead of a YAML file: ``partgnn.fit(partgnn.TrainConfig(...))``.
The model contract a model must follow on a partition is docs/MODEL_CONTRACT.md.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch_geometric.data import Data

from partgnn.distributed.context import DistContext
from partgnn.distributed.exchange_plan import Transport
from partgnn.distributed.gradients import GradientCombination, all_reduce_gradients
from partgnn.distributed.halo_exchange import HaloExchanger
from partgnn.partition.assign import partition_graph
from partgnn.partition.halo_plan import HaloPlan, build_halo_plans
from partgnn.train.loss import edge_loss, weighted_count

if TYPE_CHECKING:
    from partgnn.metrics.run_summary import RunSummary
    from partgnn.train.config.sections import TrainConfig


def partition_event(
    graph: Data, n_parts: int, method: str = "metis", *, seed: int = 0
) -> list[HaloPlan]:
    """Splits one event graph into ``n_parts`` parts and returns every rank's halo plan.

    Deterministic: every rank computing it for the same graph gets the same plans, so a script
    may partition on each rank instead of reading shards.

    Args:
        graph: The whole event: ``edge_index`` ``(2, E)``; ``pos`` ``(N, 3)`` for the
            geometric methods.
        n_parts: Parts ``P`` (ranks of the graph-parallel group).
        method: ``metis``, ``phi``, ``eta`` or ``phieta``.
        seed: Partitioner seed.

    Returns:
        ``P`` plans; plan ``r`` lists rank ``r``'s owned and halo nodes, local edges and what it
        sends and receives per exchange.
    """
    assignment = partition_graph(graph, n_parts, method, seed=seed)
    return build_halo_plans(graph.edge_index.cpu().numpy(), assignment, n_parts)


def local_graph(graph: Data, plan: HaloPlan) -> Data:
    """One rank's partition of a whole event graph, in local indices.

    Returns:
        ``Data`` with ``x`` ``(n_owned + n_halo, F_node)`` (owned rows first; halo rows hold the
        inputs, which the model does not read: it gets halo latents from the exchange),
        ``edge_index`` ``(2, E_local)``, ``edge_attr`` ``(E_local, F_edge)`` and ``y``
        ``(E_local,)`` when the graph has them, ``edge_owned`` ``(E_local,)`` (the edges this
        rank counts: each global edge is counted by exactly one rank), ``edge_ids`` (their
        global ids), ``n_owned``, and the whole event's ``n_global_edges`` and (with ``y``)
        ``n_global_true_edges``, which :func:`owned_edge_loss` normalises by.
    """
    nodes = torch.from_numpy(plan.local_nodes)
    edges = torch.from_numpy(plan.edge_ids)
    part = Data(
        x=graph.x[nodes] if graph.x is not None else None,
        edge_index=torch.from_numpy(plan.edge_index),
        edge_owned=torch.from_numpy(plan.edge_owned),
        edge_ids=edges,
        n_owned=plan.n_owned,
        n_global_edges=int(graph.edge_index.shape[1]),
    )
    if graph.edge_attr is not None:
        part.edge_attr = graph.edge_attr[edges]
    if getattr(graph, "y", None) is not None:
        part.y = graph.y[edges]
        part.n_global_true_edges = int((graph.y > 0.5).sum())
    return part


def make_exchange(
    plan: HaloPlan, context: DistContext, *, transport: Transport = "auto"
) -> HaloExchanger:
    """The differentiable halo exchange of ``plan``'s rank: ``h_owned -> [h_owned; h_halo]``.

    Pass it as the model's ``exchange``. Calling it is a collective of the graph-parallel group
    (and so is its backward).
    """
    return HaloExchanger.for_plan(plan, context, transport=transport)


def owned_edge_loss(logits: torch.Tensor, part: Data, *, pos_weight: float = 1.0) -> torch.Tensor:
    """Weighted BCE over the edges this rank counts, divided by the event's weighted edge count.

    The normaliser is the trainer's (:mod:`partgnn.train.loss`): ``E + (pos_weight - 1) *
    E_true`` of the whole event, from ``part`` (:func:`local_graph`). So the losses of all
    ranks add up to the whole-graph loss, and their gradients, summed over the ranks
    (:func:`sum_gradients`), are the whole-graph gradient of what ``partgnn train`` minimises.

    Args:
        logits: This rank's local edge logits ``(E_local,)``.
        part: This rank's partition from :func:`local_graph` (with ``y``).
        pos_weight: Weight of true edges (false edges weigh 1).
    """
    owned = part.edge_owned.to(logits.device)
    y = part.y.to(logits.device, logits.dtype)[owned]
    normaliser = weighted_count(part.n_global_edges, part.n_global_true_edges, pos_weight)
    return edge_loss(logits[owned], y, pos_weight, normaliser)


def sum_gradients(model: nn.Module, context: DistContext) -> None:
    """Sums every parameter's gradient over the graph-parallel group (one all-reduce).

    With several graph-parallel groups (data parallel) the groups' sums are then averaged. A
    parameter without a gradient on this rank contributes zeros, so every rank runs the same
    collective even when it owns no edges.
    """
    all_reduce_gradients(model.parameters(), context, combination=GradientCombination.GRAPH_SUM)


def fit(
    config: TrainConfig | str | os.PathLike[str],
    *,
    overrides: Sequence[str] = (),
    resume: bool | str = False,
    replace: bool = False,
    context: DistContext | None = None,
) -> RunSummary:
    """Trains a run config on the launched processes, as ``partgnn train`` does (one workflow,
    :func:`~partgnn.train.training_run.run_training`: the world size checked against the
    shards, ``run.keep_freed_heap``, stop signals); returns the run's summary (what its
    ``summary.json`` holds: :class:`~partgnn.metrics.run_summary.RunSummary`).

    Args:
        config: A :class:`~partgnn.train.config.sections.TrainConfig` (validated here), a YAML path,
        or
            the name of a shipped config.
        overrides: ``section.field=value`` strings, as ``--set`` on the command line (only with
            a path or a name).
        resume: Continue from the run directory's last checkpoint (``"auto"``: when there
            is one, else start afresh).
        replace: Start afresh where the run directory holds a run, removing its files first
            (without it, and without ``resume``, that is refused).
        context: The processes' distributed context; default: initialise ``torch.distributed``
            here (the graph group's size from the shards) and tear it down at the end.

    Raises:
        InputError: A bad config, or shards that do not fit the launched world size.
    """
    from partgnn.train.config.config_file import load_config, validate_config
    from partgnn.train.config.sections import TrainConfig
    from partgnn.train.training_run import run_training

    if isinstance(config, TrainConfig):
        if overrides:
            raise ValueError("overrides apply to a config file; change the TrainConfig instead")
        validate_config(config)
    else:
        config = load_config(config, overrides)
    summary, _ = run_training(config, resume=resume, replace=replace, context=context)
    return summary
