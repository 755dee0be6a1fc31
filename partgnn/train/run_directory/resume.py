"""Where a run starts: afresh, from its own newest intact checkpoint, or not at all.

:func:`resume_source` is the choice every rank makes together (the main process reads the run
directory; the others take its answer); :func:`check_resumable` refuses a checkpoint whose
model or trajectory differs from the config's; :func:`init_weights_from` starts a new run
from another's weights (``run.init_from``); :func:`finished_summary` recognises a finished
run resumed, which changes nothing.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from partgnn.data.graphs.input_features import InputFeatures
from partgnn.distributed.context import DistContext
from partgnn.distributed.gradients import max_over_ranks
from partgnn.errors import InputError, first_line
from partgnn.metrics.run_summary import RunSummary
from partgnn.models.config import ModelConfig
from partgnn.train.config.model_settings import check_same_model
from partgnn.train.modes import ModeFacts
from partgnn.train.run_directory.checkpoints import (
    LAST,
    newest_intact_checkpoint,
    step_of,
    step_path,
)
from partgnn.train.run_directory.existing_run import clear_run, existing_run, kept_in_run_folders
from partgnn.train.run_directory.existing_run import refusal as run_refusal
from partgnn.train.run_directory.saved_model import SavedModel
from partgnn.train.run_directory.training_checkpoint import TrainingCheckpoint
from partgnn.train.strategies import RECORDED_TRAJECTORY_LABELS

#: The main process's answers in :func:`resume_source` (the other ranks vote :data:`_NOT_MAIN`,
#: below every answer): start afresh, refuse, or a step (0: last.pt).
_NOT_MAIN, _REFUSED, _AFRESH = -3, -2, -1


def resume_source(
    run_dir: Path, resume: bool | str, replace: bool, context: DistContext
) -> Path | None:
    """The checkpoint to resume from, the same on every rank (``None``: start afresh).

    The main process chooses: ``last.pt``, or when it is missing or damaged the newest intact
    ``step-NNNNNNN.pt`` (saying which it skipped and why). ``"auto"`` starts afresh when the run
    has no checkpoint at all; a run whose checkpoints are all damaged, or ``resume=True``
    without one, is refused on every rank. Starting afresh where a run is
    (:func:`~partgnn.train.run_directory.existing_run.existing_run`) is refused unless ``replace``;
    the old run's files (or a stopped run's remnants) are removed first.

    Raises:
        InputError: Refused (the main process's line, on every rank).
    """
    directory = run_dir / "checkpoints"
    choice, refusal = _NOT_MAIN, ""
    if context.is_main:
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
            run = existing_run(run_dir)
            if run is not None and not replace:
                choice, refusal = _REFUSED, run_refusal(run)
            else:
                choice = _AFRESH
                clear_run(run_dir)
                _say_kept(run_dir)
    choice = max_over_ranks(choice, context)  # the main process's choice
    if choice == _REFUSED:
        if context.global_world_size > 1:  # every rank says the main process's line
            message = [refusal]
            dist.broadcast_object_list(message, src=0)
            refusal = message[0]
        raise InputError(refusal)
    if choice == _AFRESH:
        return None
    return directory / LAST if choice == 0 else step_path(directory, choice)


def _say_kept(run_dir: Path) -> None:
    """One line naming the files in the run's folders that a run did not write (kept)."""
    kept = [path.relative_to(run_dir).as_posix() for path in kept_in_run_folders(run_dir)]
    if kept:
        shown = ", ".join(kept[:3]) + (f" and {len(kept) - 3} more" if len(kept) > 3 else "")
        print(f"partgnn: train: kept {shown} in {run_dir} (not written by a run)",
              file=sys.stderr, flush=True)  # fmt: skip


def check_resumable(
    checkpoint: TrainingCheckpoint,
    path: Path,
    model: ModelConfig,
    trajectory: dict[str, Any],
    features: InputFeatures,
) -> None:
    """Refuses to resume from a checkpoint of another model, one trained on other input
    columns, or one whose run computed another trajectory (:func:`trajectory_settings`).

    Raises:
        InputError: One line naming what differs (old -> new) and what to do instead.
    """
    check_same_model(checkpoint.saved_model.model_config(), model, str(path))
    check_same_inputs(checkpoint.saved_model, features, str(path))
    try:
        saved = checkpoint.trajectory or trajectory_settings(checkpoint.config)
    except (KeyError, TypeError):  # a checkpoint older than these settings
        saved = {}
    if "strategy" in saved:  # recorded by an older partgnn under its old key and labels
        saved = {**saved, "mode": saved["strategy"]}
        saved["mode"] = RECORDED_TRAJECTORY_LABELS.get(saved["mode"], saved["mode"])
    changed = [
        f"{key} {saved[key]!r} -> {value!r}"
        for key, value in trajectory.items()
        if key in saved and saved[key] != value
    ]
    if changed:
        raise InputError(
            f"{path}: resuming would change what the run computes ({'; '.join(changed)}): "
            "resume with the checkpoint's settings, or start a new schedule from its "
            f"weights with run.init_from={path} and another run.dir"
        )


def check_same_inputs(saved: SavedModel, features: InputFeatures, where: str) -> None:
    """Refuses a checkpoint whose model read other input columns than ``features`` (other
    names, order or scales: the same widths would load and read the wrong columns).

    Raises:
        InputError: One line naming both lists.
    """
    recorded = saved.input_columns()
    trained = InputFeatures.parse(recorded["node_features"], recorded["edge_features"],
                                  where=where)  # fmt: skip
    if trained != features:
        raise InputError(
            f"{where}: the model was trained on {trained.describe()}; the config names "
            f"{features.describe()}: give data.node_features and data.edge_features as it was "
            "trained"
        )


def init_weights_from(
    model: torch.nn.Module, spec: str, config: ModelConfig, features: InputFeatures
) -> None:
    """Loads the weights (and input standardisation) of checkpoint ``spec`` into ``model``
    (``run.init_from``: fine-tuning; optimizer and schedule start afresh).

    Raises:
        InputError: Unreadable, another model's settings, or weights that do not fit.
    """
    where = f"run.init_from {spec}"
    saved = dataclasses.replace(SavedModel.read(spec, "cpu"), where=where)
    check_same_model(saved.model_config(), config, where)
    check_same_inputs(saved, features, where)
    try:
        model.load_state_dict(saved.weights)
    except RuntimeError as err:
        raise InputError(f"{where}: weights do not fit the model ({first_line(err)})") from None


def finished_summary(
    run_dir: Path, step: int, total_steps: int, context: DistContext, facts: ModeFacts
) -> RunSummary | None:
    """The summary of a finished run resumed at ``step`` (``None``: it has steps or its final
    evaluation to run), with ``already_finished``. The main process reads it; every rank gets
    the same answer (the other ranks, and a main process whose summary.json cannot be read,
    a summary of the mode ``facts`` and the steps only).
    """
    if step < total_steps:
        return None
    run = existing_run(run_dir) if context.is_main else None
    finished = run is not None and run.finished
    if not max_over_ranks(int(finished), context):
        return None
    summary = run.summary if run is not None else None
    if summary is None:
        summary = RunSummary(
            mode=facts.name, mode_facts=facts.as_record(), world_size=context.global_world_size,
            group_size=context.group_size, steps=step, total_steps=total_steps, epochs=0,
        )  # fmt: skip
    return dataclasses.replace(summary, already_finished=True, steps=step, total_steps=total_steps)


def trajectory_settings(
    config: dict[str, Any],
    *,
    mode: str | None = None,
    events_per_step: int | None = None,
    training_events: int | None = None,
) -> dict[str, Any]:
    """The settings that shape a run's trajectory, flat (``"optim.lr": 0.003``...): the
    optimizer and schedule, the loss, the data split and standardisation, the seed, dtype and
    sampling; with the run's numbers, its mode (:func:`~partgnn.train.strategies.
    trajectory_label`: the exact modes are one, halo computes the full graph exactly at any P),
    events per step (graph groups) and training events. What only
    changes how or where it is computed (P, device, transport, recomputation, logging) is not
    among them.

    Args:
        config: A run config as a dict (:meth:`TrainConfig.to_dict`).
        mode: The mode's trajectory label (omitted when ``None``: a checkpoint from before
            it was recorded).
        events_per_step, training_events: The run's (omitted when ``None``, as ``mode``).
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
    if mode is not None:
        settings["mode"] = mode
    if events_per_step is not None:
        settings["events per step"] = events_per_step
    if training_events is not None:
        settings["training events"] = training_events
    return settings
