"""The validation events of a run, and the loss and edge metrics of a model on them, reduced over
the ranks of the run."""

from __future__ import annotations

import dataclasses
import sys

import torch
import torch.distributed as dist
from torch import nn

from partgnn.distributed.context import DistContext
from partgnn.distributed.failures import agree_on_failure
from partgnn.errors import InputError
from partgnn.metrics.edge_counts import (
    SCORE_BINS,
    EdgeCounts,
    best_score_cut,
    count_edges,
    score_histograms,
)
from partgnn.metrics.epoch_metrics import ValidationMetrics
from partgnn.train.items.item_cache import ItemSource
from partgnn.train.loss import edge_loss
from partgnn.train.step import StepSettings, edge_logits
from partgnn.train.strategies import Strategy


def split_validation(
    n_events: int, val_events: int, *, where: str, say: bool = True
) -> tuple[list[int], list[int]]:
    """The training and validation events of a run: the last ``val_events`` of the data are for
    validation (``data.val_events``).

    Args:
        n_events: Events in the data.
        val_events: ``data.val_events``.
        where: The data, for the error.
        say: Warn (one line on stderr) when there is no validation (the main process).

    Returns:
        The training events' indices and the validation events'.

    Raises:
        InputError: The split leaves no training event (never clamped).
    """
    if val_events >= n_events:
        raise InputError(
            f"{where}: holds {n_events} event{'s' * (n_events != 1)}, so data.val_events "
            f"{val_events} leaves none to train on: set data.val_events to at most {n_events - 1}"
        )
    if val_events == 0 and say:
        print(
            "partgnn: warning: data.val_events is 0: no validation, and no score cut is chosen "
            "(infer records none; evaluate then uses its default)",
            file=sys.stderr,
            flush=True,
        )
    cut = n_events - val_events
    return list(range(cut)), list(range(cut, n_events))


def read_validation_events(source: ItemSource, indices: list[int], context: DistContext) -> None:
    """Reads the validation events once, now: a damaged one fails before the first step, not
    when the first epoch ends, and on every rank of the group at once (the others say which rank
    failed and why).

    .. warning::
        Collective of the job (every rank agrees on the failure).
    """
    failure = None
    try:
        for index in indices:
            source.item(index)
    except InputError as err:
        failure = err
    agree_on_failure(failure, context, "reading the validation events")


@torch.no_grad()
def evaluate(
    model: nn.Module,
    source: ItemSource,
    indices: list[int],
    strategy: Strategy,
    settings: StepSettings,
    *,
    cut_beta: float,
) -> ValidationMetrics:
    """Loss and edge metrics on the validation events ``indices`` (counts reduced across ranks).

    Each rank evaluates the events its strategy gives it and counts the edges it counts in
    training (of those, with ``loss.target_pt``, the edges the loss weighs: a non-target true
    edge left out of the loss is left out of the metrics); the loss is the sum over events of
    the weighted BCE over the sum of their weighted edge counts. Besides the metrics at the
    default cut, ``best_cut`` is the score cut that maximises the edge F-beta score
    (``cut_beta``) on these events (``best_cut_efficiency``, ``best_cut_purity`` there).

    .. warning::
        Collective over the whole job (the model's exchanges, then the reductions).
    """
    model.eval()
    context, device = strategy.context, strategy.context.device
    counts = EdgeCounts()
    histograms = torch.zeros(2, SCORE_BINS, dtype=torch.int64, device=device)
    loss_sum = torch.zeros(1, dtype=torch.float64, device=device)
    normaliser = torch.zeros(1, dtype=torch.float64, device=device)
    for index in strategy.validation_events(indices):
        item = source.item(index)
        logits = edge_logits(model, item, settings.dtype)
        logits, y = item.select_counted(logits), item.select_counted(item.y)
        boundary = item.select_counted(item.boundary)
        weight = None if item.weight is None else item.select_counted(item.weight)
        loss_sum += edge_loss(
            logits, y.to(settings.dtype), settings.weights.pos_weight, 1.0, weight=weight
        ).to(torch.float64)
        if weight is not None:  # the metrics count the edges the loss weighs
            weighed = (weight > 0).nonzero().squeeze(1)
            logits, y, boundary = (t.index_select(0, weighed) for t in (logits, y, boundary))
        scores = torch.sigmoid(logits)
        counts = counts + count_edges(scores, y, boundary, lost_y=item.lost_y)
        histograms = histograms + score_histograms(scores, y, lost_y=item.lost_y)
        if strategy.counts_event_normaliser:
            normaliser += item.event_normaliser
    if context.global_world_size > 1:
        counts = counts.all_reduce(None, device)
        dist.all_reduce(loss_sum)
        dist.all_reduce(normaliser)
        dist.all_reduce(histograms)
    best = best_score_cut(histograms, beta=cut_beta)
    return ValidationMetrics(
        **dataclasses.asdict(counts.summary()),
        loss=float(loss_sum / normaliser.clamp(min=1.0)),
        **{f"best_cut{'' if k == 'cut' else '_' + k}": v for k, v in best.items()},
    )
