"""The trainer: one loop for the modes full, halo, naive and ddp.

Every optimizer step, each rank computes the weighted BCE of the edges it counts (see
:mod:`partgnn.train.events`), back-propagates (through the halo exchanges in halo mode), and the
gradients are combined: summed over the ranks of one event in halo mode (exact: the full-graph
gradient), averaged over ranks in naive and ddp modes (and over data-parallel replicas in halo
mode). Then clipping, AdamW and the warm-up schedule.

Inputs are standardised with statistics fitted on the training events before the first step
(:mod:`partgnn.train.standardisation`); decoded events are kept across epochs within
``data.cache_mb`` and otherwise read one step ahead (:mod:`partgnn.train.item_cache`).

Event order (:mod:`partgnn.train.sampling`): every epoch the training events are cut into steps
of up to ``G`` events (graph groups in halo mode, ranks in ddp mode), randomly or by size
bucket, seeded by ``(seed, epoch)``, the same on every rank; every event is used once per
epoch. A step with fewer than ``G`` events (the last one) averages the gradient over the events
it has; the groups without an event take part in the collectives with zeros. Checkpoints
record the position in the epoch, so ``resume`` continues exactly.

.. warning::
    All ranks of the job run the same sequence of steps and collectives.
"""

from __future__ import annotations

import dataclasses
import math
import resource
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from tqdm import tqdm

from partgnn.data.output_files import remove_stale_temporaries
from partgnn.distributed.context import DistContext
from partgnn.distributed.gradients import (
    BucketedGradientReduce,
    all_reduce_gradients,
    all_reduce_value,
    max_over_ranks,
)
from partgnn.distributed.halo_exchange import CommunicationCounter
from partgnn.errors import InputError, first_line
from partgnn.metrics.edge_counts import (
    SCORE_BINS,
    EdgeCounts,
    best_score_cut,
    count_edges,
    score_histograms,
)
from partgnn.models.build import build_model
from partgnn.partition.shard_reader import ShardDirectory
from partgnn.train.checkpoints import LAST, TRAINING_STATE, load_checkpoint, save_checkpoint
from partgnn.train.config import ModelConfig, TrainConfig
from partgnn.train.events import HaloSource, NaiveSource, TrainItem, WholeGraphSource
from partgnn.train.item_cache import CachedSource
from partgnn.train.run_lock import RunLock
from partgnn.train.run_log import RunLog
from partgnn.train.sampling import epoch_steps
from partgnn.train.standardisation import (
    FeatureStatistics,
    fit_feature_statistics,
    write_feature_statistics,
)
from partgnn.train.stop_signals import StopSignals, signal_name

DTYPES = {"float32": torch.float32, "float64": torch.float64}


@dataclass
class _EpochTotals:
    """Running sums of one epoch (kept in checkpoints so a resumed epoch reports the same).

    ``seconds`` is compute and communication of the steps; ``data_seconds`` getting their
    events; ``wall_seconds`` everything between the first step's start and the last step's end
    (data, steps, logging, checkpoints), so ``wall_seconds / seconds`` is the data path's cost.
    """

    loss: float = 0.0
    steps: int = 0
    seconds: float = 0.0
    data_seconds: float = 0.0
    wall_seconds: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


@dataclass
class _Workload:
    """What the ranks computed in the training steps since the start (or resume).

    Summed over steps (and, reduced, over ranks): nodes and edges a rank computes, against the
    nodes it owns and the edges it counts in the loss. The excess is replication: halo nodes and
    cut edges held twice (halo), the margin of overlapping sectors (overlap); 0 for full and
    naive.
    """

    computed_nodes: int = 0
    owned_nodes: int = 0
    computed_edges: int = 0
    counted_edges: int = 0
    step_seconds: float = 0.0
    reduce_seconds: float = 0.0

    def add(self, item: TrainItem) -> None:
        self.computed_nodes += int(item.x.shape[0])
        self.owned_nodes += int(item.n_owned)
        self.computed_edges += int(item.edge_index.shape[1])
        self.counted_edges += item.n_counted

    def add_time(self, step_seconds: float, reduce_seconds: float) -> None:
        """A step's compute and communication time, and the part spent in the gradient
        reduction (waiting for the slowest rank, then the all-reduce itself)."""
        self.step_seconds += step_seconds
        self.reduce_seconds += reduce_seconds

    def reduced(self, context: DistContext, device: torch.device) -> dict[str, float]:
        """The sums over all ranks, with the replicated fractions (excess / owned or counted)."""
        values = torch.tensor(
            [self.computed_nodes, self.owned_nodes, self.computed_edges, self.counted_edges],
            dtype=torch.int64,
            device=device,
        )
        if context.global_world_size > 1:
            dist.all_reduce(values)
        nodes, owned, edges, counted = (int(v) for v in values.tolist())
        # Each rank's time in its own slot: the sum over ranks is every rank's time.
        times = torch.zeros((2, context.global_world_size), dtype=torch.float64, device=device)
        times[:, context.global_rank] = torch.tensor(
            [self.step_seconds, self.reduce_seconds], dtype=torch.float64
        )
        if context.global_world_size > 1:
            dist.all_reduce(times)
        step_s, reduce_s = times.cpu()
        waiting = (reduce_s / step_s.clamp(min=1e-12)).tolist()
        return {
            "computed_nodes": nodes,
            "owned_nodes": owned,
            "computed_edges": edges,
            "counted_edges": counted,
            "replicated_node_fraction": (nodes - owned) / owned if owned else float("nan"),
            "replicated_edge_fraction": (edges - counted) / counted if counted else float("nan"),
            "step_seconds_per_rank": step_s.tolist(),
            "gradient_wait_fraction_per_rank": waiting,
            "gradient_wait_fraction": sum(waiting) / len(waiting),
        }


@dataclass
class TrainState:
    """Where training stands."""

    epoch: int = 0
    step: int = 0
    step_in_epoch: int = 0
    totals: _EpochTotals = field(default_factory=_EpochTotals)


class Trainer:
    """Trains an Interaction Network edge classifier as ``config`` says, on ``context``'s ranks.

    Args:
        config: The validated run configuration.
        context: This process's rank, groups and device.

    Raises:
        InputError: If the shards do not match the world size, or there are too few events.
    """

    def __init__(self, config: TrainConfig, context: DistContext) -> None:
        self.config = config
        self.context = context
        self.run_dir = Path(config.run.dir)
        if context.is_main and self.run_dir.exists() and not self.run_dir.is_dir():
            raise InputError(f"{self.run_dir}: run.dir is a file, not a folder")
        self.mode = config.mode
        self.dtype = DTYPES[config.run.dtype]
        self.device = context.device
        self.counter = CommunicationCounter()
        # Hops of the overlapping sectors naive mode trains on (0: plain naive sectors).
        self.sector_margin = 0
        self.workload = _Workload()
        self.source = CachedSource(self._make_source(), int(config.data.cache_mb * 2**20))
        n_events = len(self.source.event_ids)
        n_val = min(config.data.val_events, max(n_events - 1, 0))
        self.train_indices = list(range(n_events - n_val))
        self.val_indices = list(range(n_events - n_val, n_events))
        if not self.train_indices:
            raise InputError(f"{self._data_path()}: no training events")
        self.events_per_step = self._events_per_step()
        self.event_sizes = None
        if config.run.sampling == "size_buckets":
            self.event_sizes = [self.source.event_size(i) for i in self.train_indices]
        self.steps_per_epoch = len(self._epoch_steps(0))
        self.total_steps = config.optim.epochs * self.steps_per_epoch
        if config.optim.max_steps is not None:
            self.total_steps = min(self.total_steps, config.optim.max_steps)
        sample = self.source.item(self.train_indices[0])
        torch.manual_seed(config.run.seed)
        self.model = build_model(config.model, sample.x.shape[1], sample.edge_attr.shape[1]).to(
            device=self.device, dtype=self.dtype
        )
        self.feature_statistics: FeatureStatistics | None = None
        if config.data.standardise:
            self.feature_statistics = fit_feature_statistics(
                (self.source.item(i) for i in self.train_indices),
                group=self.context.group,
                reduce=self.mode in ("halo", "naive") and self.context.world_size > 1,
            )
            scaler = getattr(self.model, "input_scaler", None)
            if scaler is not None:  # a model of one's own may take raw inputs
                self.feature_statistics.apply_to(scaler)
        # With overlap, gradients are reduced bucket by bucket during the backward pass.
        self.gradient_reduce: BucketedGradientReduce | None = None
        if config.run.overlap and context.global_world_size > 1:
            self.gradient_reduce = BucketedGradientReduce(
                self.model.parameters(), context, graph_parallel=self.mode == "halo"
            )
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=config.optim.lr, weight_decay=config.optim.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)
        self.state = TrainState()
        # The edge score cut chosen on the validation events at the last evaluation.
        self.score_cut: float | None = None

    # ----------------------------------------------------------------------------- set-up

    def _make_source(self) -> WholeGraphSource | HaloSource | NaiveSource:
        config, context = self.config, self.context
        pos_weight = config.loss.pos_weight
        if self.mode in ("full", "ddp"):
            if self.mode == "full" and context.global_world_size != 1:
                raise InputError(
                    f"mode full runs on one process (the world size is "
                    f"{context.global_world_size}); use mode ddp or halo"
                )
            return WholeGraphSource(
                config.data.graphs, self.device, pos_weight, config.data.boundary_shards
            )
        shards = ShardDirectory(config.data.shards, world_size=context.world_size)
        if self.mode == "naive" and context.n_graph_groups != 1:
            raise InputError(
                f"{config.data.shards}: naive mode runs one sector per rank: shards are for "
                f"{shards.n_parts} ranks but the world size is {context.global_world_size}"
            )
        if self.mode == "halo":
            return HaloSource(
                shards,
                context,
                pos_weight,
                transport=config.run.transport,
                counter=self.counter,
                overlap=config.run.overlap,
            )
        self.sector_margin = int(shards.meta.get("margin", 0))
        return NaiveSource(shards, context, pos_weight)

    @property
    def strategy(self) -> str:
        """What the run compares as: ``full``, ``ddp``, ``halo``, ``naive`` or ``overlap``
        (naive mode on sectors extended by ``sector_margin`` hops)."""
        return "overlap" if self.mode == "naive" and self.sector_margin > 0 else self.mode

    def _data_path(self) -> str:
        return str(
            self.config.data.graphs if self.mode in ("full", "ddp") else self.config.data.shards
        )

    def _events_per_step(self) -> int:
        if self.mode == "ddp":
            return self.context.global_world_size
        if self.mode == "halo":
            return self.context.n_graph_groups
        return 1

    def _lr_factor(self, step: int) -> float:
        return self.lr_scale * self._schedule(step)

    @property
    def lr_scale(self) -> float:
        """The learning rate's factor for ``G`` events per step (``optim.lr_scaling``)."""
        scaling, events = self.config.optim.lr_scaling, self.events_per_step
        return {"none": 1.0, "linear": float(events), "sqrt": math.sqrt(events)}[scaling]

    def _schedule(self, step: int) -> float:
        warmup = self.config.optim.warmup_steps
        if warmup and step < warmup:
            return (step + 1) / warmup
        if self.config.optim.schedule == "constant":
            return 1.0
        span = max(self.total_steps - warmup, 1)
        return 0.5 * (1.0 + math.cos(math.pi * min(step - warmup, span) / span))

    # ----------------------------------------------------------------------------- training

    def fit(self, *, resume: bool | str = False, stop: StopSignals | None = None) -> dict[str, Any]:
        """Trains for the configured epochs (or steps); returns the summary.

        The main process holds the run directory's lock (:class:`RunLock`) throughout and first
        removes temporary files a killed run left. SIGTERM or SIGUSR1 stop the run at the next
        step boundary: all ranks agree, a checkpoint is written, and the summary says
        ``stopped_by`` (no summary.json: the run is not finished).

        Args:
            resume: ``True``: continue from ``<run dir>/checkpoints/last.pt`` (it must exist);
                ``"auto"``: continue from it when it exists, else start afresh (what a restarted
                job wants); ``False``: start afresh.
            stop: Stop signals the caller already holds (``partgnn train`` holds them from its
                start until its error is reported, so a launcher's SIGTERM to a failing rank
                does not cut its report short); by default the run holds its own.
        """
        lock = RunLock(self.run_dir).acquire() if self.context.is_main else None
        try:
            if lock is not None:
                remove_stale_temporaries(self.run_dir, self.run_dir / "checkpoints")
            if self._resolve_resume(resume):
                self._resume()
                resume = True
            else:
                resume = False
            with StopSignals() if stop is None else nullcontext(stop) as held:
                return self._fit(resume, held)
        finally:
            if lock is not None:
                lock.release()

    def _resolve_resume(self, resume: bool | str) -> bool:
        """Whether to resume: ``"auto"`` asks the main process if a checkpoint exists."""
        if resume != "auto":
            return bool(resume)
        found = self.context.is_main and (self.run_dir / "checkpoints" / LAST).is_file()
        return bool(max_over_ranks(int(found), self.context))

    def _fit(self, resume: bool, stop: StopSignals) -> dict[str, Any]:
        log = None
        if self.context.is_main:
            log = RunLog(
                self.run_dir,
                tensorboard=self.config.run.tensorboard,
                resume_step=self.state.step if resume else None,
            )
            log.write_config(self.config.to_dict())
            if self.feature_statistics is not None:
                write_feature_statistics(self.run_dir, self.feature_statistics)
        progress = tqdm(
            total=self.total_steps,
            initial=self.state.step,
            desc=f"train {self.mode}",
            unit="step",
            disable=not (self.config.run.progress and self.context.is_main),
        )
        last_eval = None
        stopped_by = 0
        started = time.perf_counter()
        try:
            while self.state.step < self.total_steps and not stopped_by:
                steps = self._epoch_steps(self.state.epoch)
                while (
                    self.state.step_in_epoch < self.steps_per_epoch
                    and self.state.step < self.total_steps
                ):
                    iteration_start = time.perf_counter()
                    indices = steps[self.state.step_in_epoch]
                    following = steps[self.state.step_in_epoch + 1 : self.state.step_in_epoch + 2]
                    loss, seconds, data_seconds = self._train_step(
                        indices, following[0] if following else []
                    )
                    self.state.step += 1
                    self.state.step_in_epoch += 1
                    totals = self.state.totals
                    totals.loss += loss
                    totals.steps += 1
                    totals.seconds += seconds
                    totals.data_seconds += data_seconds
                    progress.update()
                    progress.set_postfix(loss=f"{loss:.4f}")
                    if log is not None:
                        log.scalar("step/loss", loss, self.state.step)
                        log.scalar("step/time_s", seconds, self.state.step)
                        log.scalar("step/lr", self.scheduler.get_last_lr()[0], self.state.step)
                    if self.state.step % self.config.run.checkpoint_every == 0:
                        self._checkpoint()
                    totals.wall_seconds += time.perf_counter() - iteration_start
                    stopped_by = self._agreed_stop(stop)
                    if stopped_by:
                        break
                if stopped_by:
                    break
                epoch_done = self.state.step_in_epoch >= self.steps_per_epoch
                last_epoch = self.state.step >= self.total_steps
                if (
                    epoch_done and (self.state.epoch + 1) % self.config.run.eval_every == 0
                ) or last_epoch:
                    last_eval = self._evaluate_and_log(log)
                if epoch_done:
                    self.state.epoch += 1
                    self.state.step_in_epoch = 0
                    self.state.totals = _EpochTotals()
            self._checkpoint()
        finally:
            progress.close()
            self.source.close()
        summary = {
            "mode": self.mode,
            "strategy": self.strategy,
            "sector_margin": self.sector_margin,
            "world_size": self.context.global_world_size,
            "graph_parallel_size": self.context.world_size,
            "steps": self.state.step,
            "total_steps": self.total_steps,
            "epochs": self.state.epoch,
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "wall_time_s": time.perf_counter() - started,
            "final": last_eval,
            "stopped_by": signal_name(stopped_by) if stopped_by else None,
            "communication": self._reduced_counter(),
            "workload": self.workload.reduced(self.context, self.device),
            "event_cache": dataclasses.asdict(self.source.statistics),
        }
        if log is not None:
            if not stopped_by:
                log.summary(summary)
            log.close()
        return summary

    def _agreed_stop(self, stop: StopSignals) -> int:
        """The stop signal any rank received (0: none); every rank gets the same answer."""
        return max_over_ranks(stop.received, self.context)

    def _epoch_steps(self, epoch: int) -> list[list[int]]:
        """The events of each step of ``epoch`` (:func:`~partgnn.train.sampling.epoch_steps`)."""
        run = self.config.run
        return epoch_steps(
            self.train_indices, self.events_per_step, seed=run.seed, epoch=epoch,
            sampling=run.sampling, sizes=self.event_sizes, n_buckets=run.size_buckets,
        )  # fmt: skip

    def _my_index(self, indices: list[int]) -> int | None:
        """The event of ``indices`` this rank trains on (``None``: its group has none)."""
        slot = 0
        if self.mode == "ddp":
            slot = self.context.global_rank
        elif self.mode == "halo":
            slot = self.context.global_rank // self.context.world_size
        return indices[slot] if slot < len(indices) else None

    def _replicas(self, indices: list[int]) -> int | None:
        """How many replicas' gradients a step with these events averages (``None``: all, in
        the modes with one event per step)."""
        return len(indices) if self.events_per_step > 1 else None

    def _train_step(self, indices: list[int], following: list[int]) -> tuple[float, float, float]:
        """One optimizer step on the events ``indices``; starts reading the ``following`` step's.

        Returns:
            The step's loss (as the mode reports it), the seconds of compute and communication,
            and the seconds spent getting this rank's event.
        """
        fetch_start = time.perf_counter()
        index = self._my_index(indices)
        item = None if index is None else self.source.item(index)
        if item is not None:
            self.workload.add(item)
        following_index = self._my_index(following)
        if following_index is not None:
            self.source.prefetch(following_index)
        start = time.perf_counter()
        self.model.train()
        self.optimizer.zero_grad(set_to_none=False)
        if self.gradient_reduce is not None:
            self.gradient_reduce.begin()
        if item is None:
            # No event for this group in this step: zeros in the gradient average.
            loss = torch.zeros((), dtype=self.dtype, device=self.device)
        else:
            loss = self._loss(item)
            loss.backward()
        replicas = self._replicas(indices)
        reduce_start = time.perf_counter()
        self._combine_gradients(replicas)
        reduce_seconds = time.perf_counter() - reduce_start
        if self.config.optim.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.optim.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        reported = self._reduce_loss(loss.detach(), replicas)
        seconds = time.perf_counter() - start
        self.workload.add_time(seconds, reduce_seconds)
        return reported, seconds, start - fetch_start

    def _loss(self, item: TrainItem) -> torch.Tensor:
        autocast = (
            torch.autocast(self.device.type, dtype=torch.bfloat16)
            if self.config.run.bf16
            else nullcontext()
        )
        with autocast:
            logits = self.model(
                item.x.to(self.dtype),
                item.edge_index,
                item.edge_attr.to(self.dtype),
                exchange=item.exchange,
            )
        return edge_loss(
            logits.to(self.dtype)[item.counted],
            item.y.to(self.dtype)[item.counted],
            self.config.loss.pos_weight,
            item.normaliser,
        )

    def _combine_gradients(self, replicas: int | None) -> None:
        if self.gradient_reduce is not None:
            self.gradient_reduce.finish(replicas=replicas)
            return
        all_reduce_gradients(
            self.model.parameters(),
            self.context,
            graph_parallel=self.mode == "halo",
            replicas=replicas,
        )

    def _reduce_loss(self, loss: torch.Tensor, replicas: int | None) -> float:
        """The step's loss: the event loss (halo: sum over ranks), averaged over the step's
        events (``replicas`` of them; else over all ranks)."""
        return all_reduce_value(
            loss, self.context, graph_parallel=self.mode == "halo", replicas=replicas
        )

    # ----------------------------------------------------------------------------- evaluation

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Loss and edge metrics on the validation events (counts reduced across ranks).

        Besides the metrics at the default cut, ``best_cut`` is the score cut that maximises
        the edge F-beta score (``run.cut_beta``) on these events (``best_cut_efficiency``,
        ``best_cut_purity`` there).
        """
        self.model.eval()
        counts = EdgeCounts()
        histograms = torch.zeros(2, SCORE_BINS, dtype=torch.int64, device=self.device)
        loss_sum = torch.zeros(1, dtype=torch.float64, device=self.device)
        # The whole events' weighted edge count: every rank of a halo group and every naive
        # sector knows it, so only rank 0 of each group contributes it.
        contributes = self.mode in ("full", "ddp") or self.context.rank == 0
        normaliser = torch.zeros(1, dtype=torch.float64, device=self.device)
        indices = self.val_indices
        if self.mode == "ddp":
            # Each rank evaluates every world_size-th validation event.
            indices = indices[self.context.global_rank :: self.context.global_world_size]
        elif self.mode == "halo" and self.context.n_graph_groups > 1:
            group_index = self.context.global_rank // self.context.world_size
            indices = indices[group_index :: self.context.n_graph_groups]
        for index in indices:
            item = self.source.item(index)
            logits = self.model(
                item.x.to(self.dtype),
                item.edge_index,
                item.edge_attr.to(self.dtype),
                exchange=item.exchange,
            )
            counted = item.counted
            loss_sum += edge_loss(
                logits[counted], item.y.to(self.dtype)[counted], self.config.loss.pos_weight, 1.0
            ).to(torch.float64)
            scores = torch.sigmoid(logits[counted])
            counts = counts + count_edges(
                scores, item.y[counted], item.boundary[counted], lost_y=item.lost_y
            )
            histograms = histograms + score_histograms(scores, item.y[counted], lost_y=item.lost_y)
            if contributes:
                normaliser += item.event_normaliser
        if self.context.global_world_size > 1:
            counts = counts.all_reduce(None, self.device)
            dist.all_reduce(loss_sum)
            dist.all_reduce(normaliser)
            dist.all_reduce(histograms)
        metrics = counts.summary()
        metrics["loss"] = float(loss_sum / normaliser.clamp(min=1.0))
        best = best_score_cut(histograms, beta=self.config.run.cut_beta)
        metrics.update({f"best_cut{'' if k == 'cut' else '_' + k}": v for k, v in best.items()})
        return metrics

    def _evaluate_and_log(self, log: RunLog | None) -> dict[str, Any]:
        metrics = self.evaluate() if self.val_indices else {}
        if "best_cut" in metrics:
            self.score_cut = metrics["best_cut"]
        memory = self._peak_memory_per_rank()
        totals = self.state.totals
        communication = self._reduced_counter()
        row = {
            "epoch": self.state.epoch,
            "step": self.state.step,
            "lr": self.scheduler.get_last_lr()[0],
            "train_loss": totals.loss / totals.steps if totals.steps else float("nan"),
            "step_time_s": totals.seconds / totals.steps if totals.steps else float("nan"),
            "data_time_s": totals.data_seconds / totals.steps if totals.steps else float("nan"),
            "epoch_wall_s": totals.wall_seconds,
            "epoch_step_s": totals.seconds,
            "peak_memory_mb_max": max(memory),
            "peak_memory_mb_per_rank": memory,
            "bytes_exchanged": communication["bytes_sent"],
            **{f"val_{k}": v for k, v in metrics.items()},
        }
        if log is not None:
            log.metrics(row)
        return row

    def _peak_memory_per_rank(self) -> list[float]:
        """Peak memory of every rank [MB]: CUDA peak allocation on GPUs, peak RSS on CPUs."""
        if self.device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(self.device) / 2**20
        else:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        if self.context.global_world_size == 1:
            return [round(peak, 1)]
        gathered = torch.zeros(
            self.context.global_world_size, dtype=torch.float64, device=self.device
        )
        gathered[self.context.global_rank] = peak
        dist.all_reduce(gathered)
        return [round(v, 1) for v in gathered.tolist()]

    def _reduced_counter(self) -> dict[str, int]:
        """Bytes all ranks sent and received in halo exchanges since the start (or resume)."""
        values = torch.tensor(
            [self.counter.bytes_sent, self.counter.bytes_received],
            dtype=torch.int64,
            device=self.device,
        )
        if self.context.global_world_size > 1:
            dist.all_reduce(values)
        return {"bytes_sent": int(values[0]), "bytes_received": int(values[1])}

    # ----------------------------------------------------------------------------- checkpoints

    def _checkpoint(self) -> None:
        if self.context.is_main:
            save_checkpoint(
                self.run_dir / "checkpoints",
                self.state.step,
                {
                    "model": self.model.state_dict(),
                    "optimizer": self.optimizer.state_dict(),
                    "scheduler": self.scheduler.state_dict(),
                    "epoch": self.state.epoch,
                    "step": self.state.step,
                    "step_in_epoch": self.state.step_in_epoch,
                    "totals": self.state.totals.as_dict(),
                    "config": self.config.to_dict(),
                    "score_cut": self.score_cut,
                },
            )
        if self.context.global_world_size > 1:
            dist.barrier()

    def _resume(self) -> None:
        path = self.run_dir / "checkpoints" / LAST
        checkpoint = load_checkpoint(path, self.device, required=TRAINING_STATE)
        try:
            saved = dataclasses.asdict(ModelConfig(**checkpoint["config"]["model"]))
        except (KeyError, TypeError) as err:
            raise InputError(f"{path}: no readable model settings ({first_line(err)})") from None
        if saved != self.config.to_dict()["model"]:
            raise InputError(f"{path}: the checkpoint's model settings differ from the config")
        self.model.load_state_dict(checkpoint["model"])
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        self.scheduler.load_state_dict(checkpoint["scheduler"])
        self.state = TrainState(
            epoch=int(checkpoint["epoch"]),
            step=int(checkpoint["step"]),
            step_in_epoch=int(checkpoint["step_in_epoch"]),
            totals=_EpochTotals(**checkpoint["totals"]),
        )
        self.score_cut = checkpoint.get("score_cut")


def edge_loss(
    logits: torch.Tensor, y: torch.Tensor, pos_weight: float, normaliser: float
) -> torch.Tensor:
    """Weighted BCE summed over edges and divided by ``normaliser``.

    True edges weigh ``pos_weight``, false edges 1. With the event's *global* weighted edge
    count as normaliser, the losses of the ranks of one event add up to the full-graph loss.
    """
    weight = 1.0 + (pos_weight - 1.0) * y
    total = F.binary_cross_entropy_with_logits(logits, y, weight=weight, reduction="sum")
    return total / normaliser
