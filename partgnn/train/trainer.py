"""The trainer: one loop for the modes full, halo, naive and ddp.

What differs between the modes is the run's strategy (:mod:`partgnn.train.strategies`): its
data source, the events per step and which one this rank trains, how gradients and losses
combine, the validation split. Every optimizer step, each rank runs
:func:`~partgnn.train.step.forward_backward` on its event (the weighted BCE of the edges it
counts, :mod:`partgnn.train.loss`; back-propagated through the halo exchanges in halo mode), the
strategy's gradient reduction combines the ranks' gradients (summed over the ranks of one event
in halo mode: the full-graph gradient; averaged over data-parallel replicas), then clipping,
AdamW and the warm-up schedule.

Inputs are standardised with statistics fitted on the training events before the first step
(:mod:`partgnn.train.standardisation`); decoded events are kept across epochs within
``data.cache_mb`` and otherwise read one step ahead (:mod:`partgnn.train.item_cache`).

Event order (:mod:`partgnn.train.sampling`): every epoch the training events are cut into steps
of up to ``G`` events (graph groups in halo mode, ranks in ddp mode), randomly or by size
bucket, seeded by ``(seed, epoch)``, the same on every rank; every event is used once per
epoch. A step with fewer than ``G`` events (the last one) averages the gradient over the events
it has; the groups without an event take part in the collectives with zeros. Checkpoints
record the position in the epoch, so ``resume`` continues exactly. Validation:
:mod:`partgnn.train.validation`; what the run measures of itself: :mod:`partgnn.train.workload`.

.. warning::
    All ranks of the job run the same sequence of steps and collectives.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from tqdm import tqdm

from partgnn.data.output_files import remove_stale_temporaries
from partgnn.distributed.context import DistContext
from partgnn.distributed.device import use_deterministic_algorithms
from partgnn.distributed.gradients import max_over_ranks
from partgnn.distributed.halo_exchange import CommunicationCounter
from partgnn.errors import InputError, TrainingDiverged, first_line
from partgnn.models.build import build_model
from partgnn.models.config import ModelConfig
from partgnn.train.checkpoints import (
    LAST,
    TRAINING_STATE,
    load_checkpoint,
    newest_intact_checkpoint,
    prune_step_checkpoints,
    save_checkpoint,
    step_of,
    step_path,
)
from partgnn.train.config import TrainConfig
from partgnn.train.item_cache import CachedSource
from partgnn.train.rng_states import gather_rng_states, restore_rng_states
from partgnn.train.run_directory import clear_run, existing_run
from partgnn.train.run_directory import refusal as run_refusal
from partgnn.train.run_lock import RunLock
from partgnn.train.run_log import RunLog
from partgnn.train.sampling import epoch_steps
from partgnn.train.standardisation import (
    FeatureStatistics,
    fit_feature_statistics,
    write_feature_statistics,
)
from partgnn.train.step import StepSettings, forward_backward
from partgnn.train.stop_signals import StopSignals, signal_name
from partgnn.train.strategies import strategy_for
from partgnn.train.validation import evaluate
from partgnn.train.workload import (
    EpochTotals,
    Workload,
    bytes_exchanged,
    cuda_memory_per_rank,
    peak_memory_per_rank,
)


@dataclass
class TrainState:
    """Where training stands."""

    epoch: int = 0
    step: int = 0
    step_in_epoch: int = 0
    totals: EpochTotals = field(default_factory=EpochTotals)


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
        if config.run.deterministic:
            use_deterministic_algorithms(self.device)
        self.settings = StepSettings.of(config)
        self.counter = CommunicationCounter()
        self.strategy = strategy_for(config, context, self.counter)
        self.workload = Workload(self.device)
        self.source = CachedSource(
            self.strategy.make_source(), int(config.data.cache_mb * 2**20), device=self.device
        )
        n_events = len(self.source.event_ids)
        n_val = config.data.val_events
        if n_val >= n_events:
            raise InputError(
                f"{self.strategy.data_path}: holds {n_events} event{'s' * (n_events != 1)}, so "
                f"data.val_events {n_val} leaves none to train on: set data.val_events to at "
                f"most {n_events - 1}"
            )
        if n_val == 0 and context.is_main:
            print(
                "partgnn: warning: data.val_events is 0: no validation, and no score cut is "
                "chosen (infer records none; evaluate then uses its default)",
                file=sys.stderr,
                flush=True,
            )
        self.train_indices = list(range(n_events - n_val))
        self.val_indices = list(range(n_events - n_val, n_events))
        self.events_per_step = self.strategy.n_replicas
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
            device=self.device, dtype=self.settings.dtype
        )
        self.feature_statistics: FeatureStatistics | None = None
        if config.run.init_from is not None:
            self._init_from(config.run.init_from)
        elif config.data.standardise:
            self.feature_statistics = fit_feature_statistics(
                (self.source.item(i) for i in self.train_indices),
                group=self.context.group,
                reduce=self.strategy.reduces_feature_statistics,
            )
            scaler = getattr(self.model, "input_scaler", None)
            if scaler is not None:  # a model of one's own may take raw inputs
                self.feature_statistics.apply_to(scaler)
        self.gradient_reduce = self.strategy.gradient_reduce(list(self.model.parameters()))
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=config.optim.lr, weight_decay=config.optim.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)
        self.state = TrainState()
        #: Wall time [s] of the sittings before this one (from the checkpoint resumed).
        self.earlier_wall_s = 0.0
        self._sitting_start = time.perf_counter()
        #: Step of the last checkpoint written or resumed from (0: none).
        self.last_saved_step = 0
        # The edge score cut chosen on the validation events at the last evaluation.
        self.score_cut: float | None = None

    # ----------------------------------------------------------------------------- set-up

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

    def fit(
        self,
        *,
        resume: bool | str = False,
        replace: bool = False,
        stop: StopSignals | None = None,
    ) -> dict[str, Any]:
        """Trains for the configured epochs (or steps); returns the summary.

        The main process holds the run directory's lock (:class:`RunLock`) throughout and first
        removes temporary files a killed run left. SIGTERM or SIGUSR1 stop the run at the next
        step boundary: all ranks agree, a checkpoint is written, and the summary says
        ``stopped_by`` (no summary.json: the run is not finished). A run directory that holds a
        run (:mod:`partgnn.train.run_directory`) is continued with ``resume``, replaced with
        ``replace``, and otherwise refused; resuming a finished run changes nothing and returns
        its summary with ``already_finished: True``.

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
        lock = RunLock(self.run_dir).acquire() if self.context.is_main else None
        try:
            if lock is not None:
                remove_stale_temporaries(self.run_dir, self.run_dir / "checkpoints")
            source = self._resume_source(resume, replace)
            if source is not None:
                self._resume(source)
                finished = self._finished_summary()
                if finished is not None:
                    return finished
            resume = source is not None
            with StopSignals() if stop is None else nullcontext(stop) as held:
                return self._fit(resume, held)
        finally:
            if lock is not None:
                lock.release()

    def _resume_source(self, resume: bool | str, replace: bool) -> Path | None:
        """The checkpoint to resume from, the same on every rank (``None``: start afresh).

        The main process chooses: ``last.pt``, or when it is missing or damaged the newest
        intact ``step-NNNNNNN.pt`` (saying which it skipped and why). ``"auto"`` starts afresh
        when the run has no checkpoint at all; a run whose checkpoints are all damaged, or
        ``resume=True`` without one, is refused on every rank. Starting afresh where a run is
        (:func:`~partgnn.train.run_directory.existing_run`) is refused unless ``replace``; the
        old run's files (or a stopped run's remnants) are removed first.
        """
        directory = self.run_dir / "checkpoints"
        choice, refusal = _NOT_MAIN, ""
        if self.context.is_main:
            path, skipped = newest_intact_checkpoint(directory) if resume else (None, [])
            if path is not None:
                choice = 0 if path.name == LAST else step_of(path)
                if skipped:
                    print(
                        f"partgnn: warning: skipped damaged checkpoints ({'; '.join(skipped)}); "
                        f"resuming from {path}",
                        file=sys.stderr,
                        flush=True,
                    )
            elif skipped or resume is True:
                choice = _REFUSED
                refusal = skipped[0] if skipped else f"{directory / LAST}: checkpoint not found"
            else:
                run = existing_run(self.run_dir)
                if run is not None and not replace:
                    choice, refusal = _REFUSED, run_refusal(run)
                else:
                    choice = _AFRESH
                    clear_run(self.run_dir)
        choice = max_over_ranks(choice, self.context)  # the main process's choice
        if choice == _REFUSED:
            if self.context.global_world_size > 1:  # every rank says the main process's line
                message = [refusal]
                dist.broadcast_object_list(message, src=0)
                refusal = message[0]
            raise InputError(refusal)
        if choice == _AFRESH:
            return None
        return directory / LAST if choice == 0 else step_path(directory, choice)

    def _finished_summary(self) -> dict[str, Any] | None:
        """The summary of the finished run resumed (``None``: it has steps or its final
        evaluation to run). The main process reads it; every rank gets the same answer."""
        if self.state.step < self.total_steps:
            return None
        run = existing_run(self.run_dir) if self.context.is_main else None
        finished = run is not None and run.finished
        if not max_over_ranks(int(finished), self.context):
            return None
        summary = dict(run.summary) if run is not None and run.summary is not None else {}
        summary.update(already_finished=True, steps=self.state.step, total_steps=self.total_steps)
        return summary

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
            desc=f"train {self.config.mode}",
            unit="step",
            disable=not (self.config.run.progress and self.context.is_main),
        )
        last_eval = None
        stopped_by = 0
        self._sitting_start = time.perf_counter()
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
                    loss, seconds, data_seconds, stopped_by = self._train_step(
                        indices, following[0] if following else [], stop.received
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
                    self.state.totals = EpochTotals()
            if last_eval is None and not stopped_by:
                # Resumed from the last step of a run stopped before its final evaluation.
                last_eval = self._evaluate_and_log(log)
            self._checkpoint()
        finally:
            progress.close()
            self.source.close()
        summary = {
            "mode": self.config.mode,
            "strategy": self.strategy.name,
            "sector_margin": self.strategy.sector_margin,
            "world_size": self.context.global_world_size,
            "graph_parallel_size": self.context.world_size,
            "steps": self.state.step,
            "total_steps": self.total_steps,
            "epochs": self.state.epoch,
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "wall_time_s": self._wall_seconds(),
            "final": last_eval,
            "stopped_by": signal_name(stopped_by) if stopped_by else None,
            "communication": bytes_exchanged(self.counter, self.context, self.device),
            "workload": self.workload.reduced(self.context, self.device),
            "event_cache": dataclasses.asdict(self.source.statistics),
        }
        if log is not None:
            if not stopped_by:
                log.summary(summary)
            log.close()
        return summary

    def _wall_seconds(self) -> float:
        """The run's wall time [s]: this sitting's and those of the sittings it resumed."""
        return self.earlier_wall_s + time.perf_counter() - self._sitting_start

    def _epoch_steps(self, epoch: int) -> list[list[int]]:
        """The events of each step of ``epoch`` (:func:`~partgnn.train.sampling.epoch_steps`)."""
        run = self.config.run
        return epoch_steps(
            self.train_indices, self.events_per_step, seed=run.seed, epoch=epoch,
            sampling=run.sampling, sizes=self.event_sizes, n_buckets=run.size_buckets,
        )  # fmt: skip

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
        else:
            loss = forward_backward(self.model, item, self.settings)
        replicas = self.strategy.replicas_in_step(indices)
        clock = self.workload.reduce_clock
        reduce_start = clock.mark()
        self.gradient_reduce.finish(replicas=replicas)
        clock.add(reduce_start, clock.mark())
        if self.config.optim.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.optim.grad_clip)
        gradients_finite = _gradients_finite(self.model, loss.device)
        non_finite = torch.stack([~torch.isfinite(loss.detach()).all(), ~gradients_finite])
        reported, stopped_by, diverged = self.strategy.reduce_loss(
            loss, replicas, stop_signal, non_finite
        )
        if diverged or not math.isfinite(reported):
            what = ", ".join(f"non-finite {kind} on rank {rank}" for rank, kind in diverged)
            raise self._diverged(
                self.state.step + 1,
                f"{what or f'non-finite loss ({reported})'}; stopped before the update",
            )
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
            strategy=self.strategy.name,
            events_per_step=self.events_per_step,
            training_events=len(self.train_indices),
        )

    def _diverged(self, step: int, what: str) -> TrainingDiverged:
        """The one-line error of a run that stops at ``step``."""
        last = (
            f"the last checkpoint (step {self.last_saved_step}) is finite"
            if self.last_saved_step
            else "no checkpoint was written"
        )
        return TrainingDiverged(
            f"step {step}: training diverged ({what}); {last}: lower optim.lr or set "
            "optim.grad_clip"
        )

    # ----------------------------------------------------------------------------- evaluation

    def evaluate(self) -> dict[str, float]:
        """Loss and edge metrics on the validation events
        (:func:`~partgnn.train.validation.evaluate`)."""
        return evaluate(
            self.model, self.source, self.val_indices, self.strategy, self.settings,
            cut_beta=self.config.run.cut_beta,
        )  # fmt: skip

    def _evaluate_and_log(self, log: RunLog | None) -> dict[str, Any]:
        metrics = self.evaluate() if self.val_indices else {}
        if "best_cut" in metrics:
            self.score_cut = metrics["best_cut"]
        memory = peak_memory_per_rank(self.context, self.device)
        totals = self.state.totals
        communication = bytes_exchanged(self.counter, self.context, self.device)
        row = {
            "epoch": self.state.epoch,
            "step": self.state.step,
            "lr": self.scheduler.get_last_lr()[0],
            "train_loss": totals.mean(totals.loss),
            "step_time_s": totals.mean(totals.seconds),
            "data_time_s": totals.mean(totals.data_seconds),
            "epoch_wall_s": totals.wall_seconds,
            "epoch_step_s": totals.seconds,
            "peak_memory_mb_max": max(memory),
            "peak_memory_mb_per_rank": memory,
            "bytes_exchanged": communication["bytes_sent"],
            **cuda_memory_per_rank(self.context, self.device),
            **{f"val_{k}": v for k, v in metrics.items()},
        }
        if log is not None:
            log.metrics(row)
        return row

    # ----------------------------------------------------------------------------- checkpoints

    def _checkpoint(self) -> None:
        if not all(bool(torch.isfinite(p).all()) for p in self.model.parameters()):
            # Every rank holds the same weights, so every rank stops here.
            raise self._diverged(
                self.state.step, "its update made the weights non-finite; they are not saved"
            )
        rng_states = gather_rng_states(self.context)
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
                    "rng_states": rng_states,
                    "trajectory": self.trajectory(),
                    "wall_time_s": self._wall_seconds(),
                },
            )
            prune_step_checkpoints(self.run_dir / "checkpoints", self.config.run.keep_checkpoints)
        self.last_saved_step = self.state.step
        if self.context.global_world_size > 1:
            dist.barrier()

    def _init_from(self, spec: str) -> None:
        """Loads the weights (and input standardisation) of checkpoint ``spec``."""
        checkpoint = load_checkpoint(spec, "cpu")
        where = f"run.init_from {spec}"
        try:
            saved = dataclasses.asdict(ModelConfig(**checkpoint["config"]["model"]))
        except (KeyError, TypeError) as err:
            raise InputError(f"{where}: no readable model settings ({first_line(err)})") from None
        ours = _function_settings(self.config.to_dict()["model"])
        theirs = _function_settings(saved)
        differing = sorted(key for key in ours if ours[key] != theirs.get(key))
        if differing:
            pairs = ", ".join(f"{key} {theirs.get(key)!r}, not {ours[key]!r}" for key in differing)
            raise InputError(f"{where}: the checkpoint's model settings differ: {pairs}")
        try:
            self.model.load_state_dict(checkpoint["model"])
        except RuntimeError as err:
            raise InputError(f"{where}: weights do not fit the model ({first_line(err)})") from None

    def _resume(self, path: Path) -> None:
        # Read onto the CPU: loading copies the weights and AdamW's moments onto the parameters'
        # device, and leaves AdamW's step counters on the CPU, where (non-fused) AdamW reads
        # them; mapped to a GPU, each would cost a host synchronisation per parameter and step.
        checkpoint = load_checkpoint(path, "cpu", required=TRAINING_STATE)
        try:
            saved = dataclasses.asdict(ModelConfig(**checkpoint["config"]["model"]))
        except (KeyError, TypeError) as err:
            raise InputError(f"{path}: no readable model settings ({first_line(err)})") from None
        if _function_settings(saved) != _function_settings(self.config.to_dict()["model"]):
            raise InputError(f"{path}: the checkpoint's model settings differ from the config")
        try:
            saved_trajectory = checkpoint.get("trajectory") or trajectory_settings(
                checkpoint["config"]
            )
        except (KeyError, TypeError):  # a checkpoint older than these settings
            saved_trajectory = {}
        changed = [
            f"{key} {saved_trajectory[key]!r} -> {value!r}"
            for key, value in self.trajectory().items()
            if key in saved_trajectory and saved_trajectory[key] != value
        ]
        if changed:
            raise InputError(
                f"{path}: resuming would change what the run computes ({'; '.join(changed)}): "
                "resume with the checkpoint's settings, or start a new schedule from its "
                f"weights with run.init_from={path} and another run.dir"
            )
        self.model.load_state_dict(checkpoint["model"])
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        self.scheduler.load_state_dict(checkpoint["scheduler"])
        self.state = TrainState(
            epoch=int(checkpoint["epoch"]),
            step=int(checkpoint["step"]),
            step_in_epoch=int(checkpoint["step_in_epoch"]),
            totals=EpochTotals(**checkpoint["totals"]),
        )
        self.score_cut = checkpoint.get("score_cut")
        self.earlier_wall_s = float(checkpoint.get("wall_time_s", 0.0))
        self.last_saved_step = self.state.step
        restore_rng_states(checkpoint.get("rng_states"), self.context)


#: The main process's answers in :meth:`Trainer._resume_source` (the other ranks vote
#: :data:`_NOT_MAIN`, below every answer): start afresh, refuse, or a step (0: last.pt).
_NOT_MAIN, _REFUSED, _AFRESH = -3, -2, -1


#: Strategies that compute the same trajectory (a run moves between them on resume).
EXACT_STRATEGIES = ("full", "halo")


def trajectory_settings(
    config: dict[str, Any],
    *,
    strategy: str | None = None,
    events_per_step: int | None = None,
    training_events: int | None = None,
) -> dict[str, Any]:
    """The settings that shape a run's trajectory, flat (``"optim.lr": 0.003``...): the
    optimizer and schedule, the loss, the data split and standardisation, the seed, dtype and
    sampling; with the run's numbers, its strategy (full and halo are one: halo computes the
    full graph exactly, at any P), events per step (graph groups) and training events. What only
    changes how or where it is computed (P, device, transport, checkpointing, logging) is not
    among them.

    Args:
        config: A run config as a dict (:meth:`TrainConfig.to_dict`).
        strategy, events_per_step, training_events: The run's (omitted when ``None``: a
            checkpoint from before they were recorded).
    """
    run, data = config["run"], config["data"]
    settings: dict[str, Any] = {f"optim.{k}": v for k, v in config["optim"].items()}
    settings.update({f"loss.{k}": v for k, v in config["loss"].items()})
    settings.update({
        "data.val_events": data["val_events"],
        "data.standardise": data["standardise"],
        "run.seed": run["seed"],
        "run.dtype": run["dtype"],
        "run.sampling": run["sampling"],
        "run.size_buckets": run["size_buckets"] if run["sampling"] == "size_buckets" else None,
    })  # fmt: skip
    if strategy is not None:
        settings["strategy"] = "full/halo" if strategy in EXACT_STRATEGIES else strategy
    if events_per_step is not None:
        settings["events per step"] = events_per_step
    if training_events is not None:
        settings["training events"] = training_events
    return settings


def _gradients_finite(model: torch.nn.Module, device: torch.device) -> torch.Tensor:
    """Whether every gradient of ``model`` is finite, as a 0-d bool tensor on ``device`` (no
    host read)."""
    checks = [torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None]
    if not checks:
        return torch.ones((), dtype=torch.bool, device=device)
    return torch.stack(checks).all().to(device)


#: Model settings that change how the model is computed, not what: a run resumes across them
#: and starts from (``run.init_from``) a checkpoint saved with other values.
COMPUTE_ONLY_MODEL_SETTINGS = ("fused", "checkpoint")


def _function_settings(model: dict) -> dict:
    """A model config's settings without :data:`COMPUTE_ONLY_MODEL_SETTINGS`."""
    return {key: value for key, value in model.items() if key not in COMPUTE_ONLY_MODEL_SETTINGS}
