"""One rank of the padded-step test: ``python -m tests.train.padded_step_worker GRAPHS SHARDS
OUT``.

For each setting (communication hiding, recomputation, transport) builds a halo-mode trainer in
float64 on this rank's shard, runs :func:`~partgnn.train.step.forward_backward` on event 0 as it
is and padded to its shape (:func:`~partgnn.train.items.padded_items.pad_item`), and saves both
losses and parameter gradients summed over the ranks, with the padded shape, to
``OUT.rank<rank>``.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import torch

from partgnn.distributed.process_group import destroy_distributed, init_distributed
from partgnn.train.config.config_file import load_config
from partgnn.train.items.padded_items import pad_item
from partgnn.train.step import forward_backward
from partgnn.train.trainer import Trainer
from tests.distributed.reference import summed_over_ranks
from tests.train.conftest import write_config

SETTINGS = [
    {"hide": hide, "recompute": recompute, "transport": transport}
    for hide, recompute, transport in itertools.product(
        (True, False), (True, False), ("all_to_all", "p2p")
    )
]


def step_of(trainer: Trainer, item) -> tuple[dict, torch.Tensor]:
    """Summed gradients and loss of one forward-backward pass of ``item``."""
    trainer.model.zero_grad(set_to_none=True)
    loss = forward_backward(trainer.model, item, trainer.settings)
    return summed_over_ranks(trainer.model, loss, trainer.context.group)


def main() -> int:
    graphs, shards, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    context = init_distributed(device="cpu", timeout_s=120)
    results = []
    try:
        for index, setting in enumerate(SETTINGS):
            config = write_config(
                out.parent / f"padded-{index}-rank{context.global_rank}.yaml",
                mode="halo",
                data={"graphs": graphs, "shards": shards},
                model={"recompute": setting["recompute"]},
                run={"dir": str(out.parent / f"run-{index}"),
                     "hide_communication": setting["hide"], "transport": setting["transport"]},
            )  # fmt: skip
            trainer = Trainer(load_config(config), context)
            item = trainer.source.item(0)
            padded = pad_item(item, trainer.settings.weights, trainer.settings.dtype)
            plain = step_of(trainer, item)
            pads = step_of(trainer, padded.item)
            results.append({"setting": setting, "plain": plain, "padded": pads,
                            "shape": padded.shape, "n_edges": padded.n_edges})  # fmt: skip
        torch.save(results, out.with_name(f"{out.name}.rank{context.global_rank}"))
    finally:
        destroy_distributed(context)
    return 0


if __name__ == "__main__":
    sys.exit(main())
