"""A whole training run on the launched processes: what ``partgnn train`` and
:func:`partgnn.api.fit` both do, so that the two behave the same.

The world size is checked against the shards before any collective, the process keeps freed heap
for reuse when the config says so (``run.keep_freed_heap``), ``torch.distributed`` is set up
for the run (unless the caller has a context already) and torn down after it, and stop signals
(SIGTERM, or the SIGUSR1 a scheduler sends ahead of preemption) stop the run after a
checkpointed step.
"""

from __future__ import annotations

from partgnn.distributed.context import DistContext
from partgnn.distributed.session import distributed_session
from partgnn.metrics.run_summary import RunSummary
from partgnn.train.config.sections import TrainConfig
from partgnn.train.stop_signals import StopSignals
from partgnn.train.trainer import Trainer
from partgnn.train.world_size import check_world_size


def run_training(
    config: TrainConfig,
    *,
    resume: bool | str = False,
    replace: bool = False,
    timeout_s: float | None = None,
    context: DistContext | None = None,
) -> tuple[RunSummary, DistContext]:
    """Trains the validated ``config`` to its end (or a stop signal); returns the run's summary
    and the context it ran on.

    Args:
        config: A validated run config (:func:`~partgnn.train.config.config_file.load_config`).
        resume: Continue from the run directory's checkpoint (``"auto"``: when there is one).
        replace: Start afresh where the run directory holds a run, removing its files first.
        timeout_s: The collectives' timeout [s] (default: ``$PARTGNN_DIST_TIMEOUT``, else
            ``run.timeout_s``).
        context: The processes' distributed context; default: set up here for the run
            (graph groups of the shards' P) and torn down after it.

    Raises:
        InputError: Shards that do not fit the launched world size (before any collective), or
            anything the trainer refuses.
    """
    group_size = check_world_size(config)
    if config.run.keep_freed_heap:
        from partgnn.memory.heap_retention import keep_freed_heap

        keep_freed_heap()
    # Held until this returns: a SIGTERM during setup stops the run after its first step, and
    # one sent to a rank that is already failing (torchrun's to the survivors of a lost rank)
    # waits for its error report instead of ending it unsaid.
    with StopSignals() as stop:
        if context is not None:
            return Trainer(config, context).fit(resume=resume, replace=replace, stop=stop), context
        with distributed_session(
            device=config.run.device,
            backend=config.run.backend,
            timeout_s=timeout_s,
            default_timeout_s=config.run.timeout_s,
            group_size=group_size,
        ) as context:
            summary = Trainer(config, context).fit(resume=resume, replace=replace, stop=stop)
        return summary, context
