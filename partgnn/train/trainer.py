"""The trainer: one loop for the modes full, halo, naive and ddp.

What differs between the modes is the run's strategy (:mod:`partgnn.train.strategies`): its
data source, the events per step and which one this rank trains, how gradients and losses
combine. Every optimizer step, each rank runs :func:`~partgnn.train.step.forward_backward` on
its event (back-propagated through the halo exchanges in halo mode), the strategy combines the
ranks' gradients (summed over the ranks of one event: the full-graph gradient; averaged over
data-parallel replicas), then clipping, AdamW and the schedule (:mod:`partgnn.train.schedule`).
Every epoch cuts the training events into steps (:mod:`partgnn.train.items.sampling`);
checkpoints record the position (:mod:`partgnn.train.run_directory.training_checkpoint`), so a
resume continues exactly. Around the loop: input standardisation, the event cache, validation,
divergence checks and the run's own measurements, each in its module.

.. warning::
    All ranks of the job run the same sequence of steps and collectives.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from tqdm import tqdm

from partgnn.data.files.output_files import remove_stale_temporaries
from partgnn.distributed.communication_counter import CommunicationCounter
from partgnn.distributed.context import DistContext
from partgnn.distributed.device import deterministic_algorithms
from partgnn.errors import InputError
from partgnn.metrics.epoch_metrics import EpochMetrics
from partgnn.metrics.run_summary import RunSummary
from partgnn.models.build import build_model
from partgnn.train.captured_step import captured_step_for
from partgnn.train.config.sections import TrainConfig, input_features
from partgnn.train.divergence import check_step, check_weights, gradients_finite
from partgnn.train.items.item_cache import CachedSource
from partgnn.train.items.sampling import EpochPlan
from partgnn.train.items.standardisation import (
    InputStatistics,
    standardise_inputs,
    write_feature_statistics,
)
from partgnn.train.precision import bf16_notice
from partgnn.train.run_directory.resume import (
    check_resumable,
    finished_summary,
    init_weights_from,
    resume_source,
    trajectory_settings,
)
from partgnn.train.run_directory.rng_states import gather_rng_states, restore_rng_states
from partgnn.train.run_directory.run_lock import RunLock
from partgnn.train.run_directory.run_log import RunLog, epoch_row
from partgnn.train.run_directory.state import TrainState
from partgnn.train.run_directory.training_checkpoint import TrainingCheckpoint
from partgnn.train.schedule import adamw_with_schedule
from partgnn.train.step import StepSettings, forward_backward
from partgnn.train.stop_signals import StopSignals, signal_name
from partgnn.train.strategies import strategy_for
from partgnn.train.validation import evaluate, read_validation_events, split_validation
from partgnn.train.workload import (
    Workload,
    bytes_exchanged,
    cuda_memory_per_rank,
    peak_memory_per_rank,
)


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
        self.device = context.device
        self.settings = StepSettings.of(config, self.device)
        self._notice(bf16_notice(config.run.bf16, self.device))
        self.counter = CommunicationCounter()
        self.strategy = strategy_for(config, context, self.counter)
        self.workload = Workload(self.device)
        self.source = CachedSource(
            self.strategy.make_source(), int(config.data.cache_mb * 2**20), device=self.device
        )
        self.train_indices, self.val_indices = split_validation(
            len(self.source.event_ids), config.data.val_events,
            where=str(self.strategy.data_path), say=context.is_main,
        )  # fmt: skip
        read_validation_events(self.source, self.val_indices, context)
        self.events_per_step = self.strategy.n_replicas
        run = config.run
        self.epoch_plan = EpochPlan(
            self.train_indices, self.events_per_step, run.seed, config.optim.epochs,
            config.optim.max_steps, run.sampling, n_buckets=run.size_buckets,
            sizes=[self.source.event_size(i) for i in self.train_indices]
            if run.sampling == "size_buckets" else None,
        )  # fmt: skip
        self.steps_per_epoch = self.epoch_plan.steps_per_epoch
        self.total_steps = self.epoch_plan.total_steps
        sample = self.source.item(self.train_indices[0])
        torch.manual_seed(config.run.seed)
        self.model = build_model(config.model, sample.x.shape[1], sample.edge_attr.shape[1]).to(
            device=self.device, dtype=self.settings.dtype
        )
        self.feature_statistics: InputStatistics | None = None
        if config.run.init_from is not None:
            init_weights_from(self.model, config.run.init_from, config.model,
                              input_features(config))  # fmt: skip
        elif config.data.standardise:
            self.feature_statistics = standardise_inputs(
                self.model, (self.source.item(i) for i in self.train_indices),
                group=self.context.group, reduce=self.strategy.reduces_feature_statistics,
            )  # fmt: skip
        self.captured_step, notice = captured_step_for(
            config, context, self.model, self.settings, self.counter
        )
        self._notice(notice)
        self.gradient_reduce = self.strategy.gradient_reduce(
            list(self.model.parameters()), during_backward=self.captured_step is None
        )
        self.optimizer, self.scheduler = adamw_with_schedule(
            self.model.parameters(), config.optim, total_steps=self.total_steps,
            events_per_step=self.events_per_step,
        )  # fmt: skip
        self.state = TrainState()
        self._sitting_start = time.perf_counter()
        #: Step of the last checkpoint written or resumed from (0: none).
        self.last_saved_step = 0

    def _notice(self, notice: str | None) -> None:
        """Says ``notice`` once (on the main process), if there is one."""
        if notice is not None and self.context.is_main:
            print(f"partgnn: notice: {notice}", file=sys.stderr)

    def fit(
        self,
        *,
        resume: bool | str = False,
        replace: bool = False,
        stop: StopSignals | None = None,
    ) -> RunSummary:
        """Trains for the configured epochs (or steps); returns the summary.

        The main process holds the run directory's lock (:class:`RunLock`) throughout and first
        removes temporary files a killed run left. SIGTERM or SIGUSR1 stop the run at the next
        step boundary: all ranks agree, a checkpoint is written, and the summary says
        ``stopped_by`` (no summary.json: the run is not finished). A run directory that holds a
        run (:mod:`partgnn.train.run_directory.existing_run`) is continued with ``resume``, replaced
        with ``replace``, and otherwise refused; resuming a finished run changes nothing and returns
        its summary with ``already_finished``.

        Args:
            resume: ``True``: continue from ``<run dir>/checkpoints/last.pt`` (it must exist);
                ``"auto"``: continue from it when it exists, else start afresh (what a restarted
                job wants); ``False``: start afresh.
            replace: Starting afresh over a run removes the old run's files first (without it
                that is refused).
            stop: Stop signals the caller already holds (``partgnn train`` holds them from its
                start until its error is reported, so a launcher's SIGTERM to a failing rank
                does not cut its report short); by default the run holds its own.
        """
        with ExitStack() as held:
            if self.context.is_main:
                held.enter_context(RunLock(self.run_dir))
                remove_stale_temporaries(self.run_dir, self.run_dir / "checkpoints")
            source = resume_source(self.run_dir, resume, replace, self.context)
            if source is not None:
                self._resume(source)
                finished = finished_summary(
                    self.run_dir, self.state.step, self.total_steps, self.context,
                    self.strategy.facts,
                )  # fmt: skip
                if finished is not None:
                    return finished
            held.enter_context(deterministic_algorithms(self.device, self.config.run.deterministic))
            stop = held.enter_context(StopSignals()) if stop is None else stop
            summary = self._fit(source is not None, stop)
            if self.captured_step is not None and self.context.is_main:
                print(f"partgnn: {self.captured_step.tally()}", file=sys.stderr)
            return summary

    def _fit(self, resume: bool, stop: StopSignals) -> RunSummary:
        log = None
        if self.context.is_main:
            log = RunLog.begin(
                self.run_dir, self.config.to_dict(), tensorboard=self.config.run.tensorboard,
                loggers=self.config.run.loggers, resume_step=self.state.step if resume else None,
            )  # fmt: skip
            if self.feature_statistics is not None:
                write_feature_statistics(self.run_dir, self.feature_statistics)
        progress = tqdm(
            total=self.total_steps,
            initial=self.state.step,
            desc=f"train {self.strategy.name}",
            unit="step",
            disable=not (self.config.run.progress and self.context.is_main),
        )
        last_eval = None
        stopped_by = 0
        self._sitting_start = time.perf_counter()
        try:
            while self.state.step < self.total_steps and not stopped_by:
                steps = self.epoch_plan.steps(self.state.epoch)
                while (
                    self.state.step_in_epoch < self.steps_per_epoch
                    and self.state.step < self.total_steps
                ):
                    iteration_start = time.perf_counter()
                    indices = steps[self.state.step_in_epoch]
                    following = steps[self.state.step_in_epoch + 1 : self.state.step_in_epoch + 2]
                    loss, seconds, data_seconds, stopped_by = self._train_step(
                        indices, following[0] if following else [], stop.received
                    )
                    self.state.record_step(loss, seconds, data_seconds)
                    progress.update()
                    progress.set_postfix(loss=f"{loss:.4f}")
                    if log is not None:
                        log.scalar("step/loss", loss, self.state.step)
                        log.scalar("step/time_s", seconds, self.state.step)
                        log.scalar("step/lr", self.scheduler.get_last_lr()[0], self.state.step)
                    if self.state.step % self.config.run.checkpoint_every == 0:
                        self._checkpoint()
                    self.state.totals.wall_seconds += time.perf_counter() - iteration_start
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
                    self.state.next_epoch()
            if last_eval is None and not stopped_by:
                # Resumed from the last step of a run stopped before its final evaluation.
                last_eval = self._evaluate_and_log(log)
            self._checkpoint()
        finally:
            progress.close()
            self.source.close()
        summary = self._summary(last_eval, stopped_by)
        if log is not None:
            if not stopped_by:
                log.summary(summary)
            log.close()
        return summary

    def _summary(self, last_eval: EpochMetrics | None, stopped_by: int) -> RunSummary:
        """The run's summary now (collective: the workload and the bytes are reduced)."""
        return RunSummary(
            mode=self.strategy.name,
            mode_facts=self.strategy.facts.as_record(),
            sector_margin=self.strategy.sector_margin,
            world_size=self.context.global_world_size,
            group_size=self.context.group_size,
            steps=self.state.step,
            total_steps=self.total_steps,
            epochs=self.state.epoch,
            parameters=sum(p.numel() for p in self.model.parameters()),
            wall_time_s=self._wall_seconds(),
            final=last_eval,
            stopped_by=signal_name(stopped_by) if stopped_by else None,
            communication=bytes_exchanged(self.counter, self.context, self.device),
            workload=self.workload.reduced(self.context, self.device),
            event_cache=dataclasses.asdict(self.source.statistics),
        )

    def _wall_seconds(self) -> float:
        """The run's wall time [s]: this sitting's and those of the sittings it resumed."""
        return self.state.earlier_wall_s + time.perf_counter() - self._sitting_start

    def _train_step(
        self, indices: list[int], following: list[int], stop_signal: int
    ) -> tuple[float, float, float, int]:
        """One optimizer step on the events ``indices``; starts reading the ``following`` step's.

        Args:
            indices: The step's events.
            following: The next step's events (read ahead).
            stop_signal: The stop signal this rank received so far (0: none).

        Returns:
            The step's loss (as the mode reports it), the seconds of compute and communication,
            the seconds spent getting this rank's event, and the stop signal any rank received
            (every rank gets the same; agreed with the loss, one host read per step).
        """
        fetch_start = time.perf_counter()
        index = self.strategy.event_of_rank(indices)
        item = None if index is None else self.source.item(index)
        if item is not None:
            self.workload.add(item)
        following_index = self.strategy.event_of_rank(following)
        if following_index is not None:
            self.source.prefetch(following_index)
        start = time.perf_counter()
        self.model.train()
        self.optimizer.zero_grad(set_to_none=False)
        self.gradient_reduce.begin()
        if item is None:
            # No event for this group in this step: zeros in the gradient average.
            loss = torch.zeros((), dtype=self.settings.dtype, device=self.device)
        elif self.captured_step is not None:
            loss = self.captured_step(item)
        else:
            loss = forward_backward(self.model, item, self.settings)
        replicas = self.strategy.replicas_in_step(indices)
        clock = self.workload.reduce_clock
        reduce_start = clock.mark()
        self.gradient_reduce.finish(replicas=replicas)
        clock.add(reduce_start, clock.mark())
        if self.config.optim.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.optim.grad_clip)
        finite_gradients = gradients_finite(self.model, loss.device)
        non_finite = torch.stack([~torch.isfinite(loss.detach()).all(), ~finite_gradients])
        reported, stopped_by, non_finite_ranks = self.strategy.reduce_loss(
            loss, replicas, stop_signal, non_finite
        )
        check_step(reported, non_finite_ranks, self.state.step + 1, self.last_saved_step)
        self.optimizer.step()
        self.scheduler.step()
        seconds = time.perf_counter() - start
        self.workload.add_time(seconds)
        return reported, seconds, start - fetch_start, stopped_by

    def trajectory(self) -> dict[str, Any]:
        """What shapes this run's trajectory (:func:`trajectory_settings`), recorded in every
        checkpoint and compared on resume."""
        return trajectory_settings(
            self.config.to_dict(),
            mode=self.strategy.trajectory_label,
            events_per_step=self.events_per_step,
            training_events=len(self.train_indices),
        )

    def _evaluate_and_log(self, log: RunLog | None) -> EpochMetrics:
        validation = None
        if self.val_indices:  # loss and edge metrics (:func:`~partgnn.train.validation.evaluate`)
            validation = evaluate(
                self.model, self.source, self.val_indices, self.strategy, self.settings,
                cut_beta=self.config.run.cut_beta,
            )  # fmt: skip
            self.state.score_cut = validation.best_cut
        metrics = epoch_row(
            self.state.epoch, self.state.step, self.state.totals,
            lr=self.scheduler.get_last_lr()[0],
            memory_mb=peak_memory_per_rank(self.context, self.device),
            bytes_sent=bytes_exchanged(self.counter, self.context, self.device).bytes_sent,
            cuda_memory=cuda_memory_per_rank(self.context, self.device),
            validation=validation,
        )  # fmt: skip
        if log is not None:
            log.metrics(metrics)
        return metrics

    def _checkpoint(self) -> None:
        check_weights(self.model, self.state.step, self.last_saved_step)
        rng_states = gather_rng_states(self.context)
        if self.context.is_main:
            TrainingCheckpoint(
                model=self.model.state_dict(),
                optimizer=self.optimizer.state_dict(),
                scheduler=self.scheduler.state_dict(),
                state=self.state,
                wall_time_s=self._wall_seconds(),
                config=self.config.to_dict(),
                rng_states=rng_states,
                trajectory=self.trajectory(),
            ).save(self.run_dir / "checkpoints", keep=self.config.run.keep_checkpoints)
        self.last_saved_step = self.state.step
        if self.context.global_world_size > 1:
            dist.barrier()

    def _resume(self, path: Path) -> None:
        checkpoint = TrainingCheckpoint.load(path)
        check_resumable(checkpoint, path, self.config.model, self.trajectory(),
                        input_features(self.config))  # fmt: skip
        self.model.load_state_dict(checkpoint.model)
        self.optimizer.load_state_dict(checkpoint.optimizer)
        self.scheduler.load_state_dict(checkpoint.scheduler)
        self.state = checkpoint.state
        self.last_saved_step = self.state.step
        restore_rng_states(checkpoint.rng_states, self.context)
