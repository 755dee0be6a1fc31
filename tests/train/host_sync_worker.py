"""One rank of the host-sync budget test: ``python -m tests.train.host_sync_worker GRAPHS SHARDS
OUT``.

For each setting (communication hiding and checkpointing on and off) trains halo mode for
:data:`EPOCHS` epochs and counts the host reads (:class:`tests.host_syncs.HostSyncCounter`) of every
training step after the first epoch (whose steps also decode the events, kept from then on): the
step itself (:meth:`Trainer._train_step`, which also agrees on stopping). AdamW's own step
counters are host tensors (kept on the CPU, also on GPUs), so its update is not counted.
Writes ``OUT/rank<rank>.json``: ``{setting: {kind: calls per step}}``.
"""

from __future__ import annotations

import functools
import json
import sys
from collections import Counter
from pathlib import Path

from partgnn.distributed.process_group import destroy_distributed, init_distributed
from partgnn.train.config.config_file import load_config
from partgnn.train.trainer import Trainer
from tests.host_syncs import HostSyncCounter
from tests.train.conftest import write_config

EPOCHS = 3


def _per_step(context, folder: Path, data: dict, hide: bool, checkpoint: bool):
    folder.mkdir(parents=True, exist_ok=True)
    config = write_config(
        folder / f"rank{context.global_rank}.yaml",
        mode="halo",
        data=data,
        model={"recompute": checkpoint},
        optim={"epochs": EPOCHS, "grad_clip": 1.0},
        run={"dir": str(folder / "run"), "hide_communication": hide},
    )
    trainer = Trainer(load_config(config), context)
    counts: Counter[str] = Counter()
    steps = 0

    def counted(method):
        @functools.wraps(method)
        def run(*args, **kwargs):
            if trainer.state.epoch == 0:
                return method(*args, **kwargs)
            with HostSyncCounter() as counter:
                result = method(*args, **kwargs)
            counts.update(counter.counts)
            return result

        return run

    def uncounted(method):
        @functools.wraps(method)
        def run(*args, **kwargs):
            with HostSyncCounter.paused():
                return method(*args, **kwargs)

        return run

    def training_step(*args, **kwargs):
        nonlocal steps
        steps += trainer.state.epoch > 0
        return train_step(*args, **kwargs)

    train_step = counted(trainer._train_step)
    trainer._train_step = training_step
    trainer.optimizer.step = uncounted(trainer.optimizer.step)
    trainer.fit()
    assert steps > 0
    return {kind: n / steps for kind, n in counts.items()}


def main() -> int:
    data, out = {"graphs": sys.argv[1], "shards": sys.argv[2]}, Path(sys.argv[3])
    context = init_distributed(device="cpu", timeout_s=120)
    try:
        per_step = {
            f"hide_communication={hide},checkpoint={checkpoint}": _per_step(
                context, out / f"{hide}-{checkpoint}", data, hide, checkpoint
            )
            for hide in (False, True)
            for checkpoint in (False, True)
        }
    finally:
        destroy_distributed(context)
    (out / f"rank{context.global_rank}.json").write_text(json.dumps(per_step))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
