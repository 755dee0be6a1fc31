"""One rank's training step on its own local graph, with no peer: what a rank computes, timed.

A partitioned event's rank steps its local graph (owned and halo nodes, the edges it holds) with
a loop-back halo exchange (halo rows are copies of owned rows: the sizes of the rank's exchange,
nothing waits on a peer), so its time is its own compute and kernel launches. Shared by
tools/studies/bench_work_model.py (is a rank's time its work?) and
tools/studies/bench_scaling_model.py (several GPUs from one).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from partgnn.distributed.in_process_exchanges import LoopbackExchange
from partgnn.models.build import build_model
from partgnn.models.config import ModelConfig
from partgnn.train.loss import edge_loss


class RankStep:
    """One training step (forward, loss, backward) of one rank's local graph.

    Args:
        graph: The event graph (``x``, ``edge_attr``, ``y``).
        plan: The rank's :class:`~partgnn.partition.halo_plan.HaloPlan`.
        model_config: The model.
        device: Where the rank computes.
        bf16: Under bf16 autocast.
    """

    def __init__(
        self,
        graph,
        plan,
        model_config: ModelConfig,
        device: torch.device | None = None,
        bf16: bool = False,
    ) -> None:
        device = device or torch.device("cpu")
        n_owned, n_halo = len(plan.owned_nodes), len(plan.halo_nodes)
        local_nodes = torch.from_numpy(np.concatenate([plan.owned_nodes, plan.halo_nodes]))
        edge_ids = torch.from_numpy(plan.edge_ids)
        self.x = graph.x[local_nodes].float().to(device)
        self.edge_attr = graph.edge_attr[edge_ids].float().to(device)
        self.y = graph.y[edge_ids].float().to(device)
        self.edge_index = torch.from_numpy(plan.edge_index).long().to(device)
        send_index = (torch.arange(n_halo) % max(n_owned, 1)).to(device)
        self.exchange = LoopbackExchange(send_index, n_owned, hide_communication=True)
        torch.manual_seed(0)
        self.model = build_model(model_config, self.x.shape[1], self.edge_attr.shape[1]).to(device)
        self.device, self.bf16 = device, bf16
        #: ``(local edges, owned nodes, halo nodes)``.
        self.counts = (int(self.edge_index.shape[1]), n_owned, n_halo)

    def __call__(self) -> None:
        self.model.zero_grad(set_to_none=True)
        self.forward_backward()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def forward_backward(self, *, autocast_cache: bool = True) -> None:
        """The step's forward and backward passes (gradients accumulate; nothing waits)."""
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16,
                            cache_enabled=autocast_cache):  # fmt: skip
            logits = self.model(self.x, self.edge_index, self.edge_attr, exchange=self.exchange)
        edge_loss(logits.float(), self.y, 3.0, float(self.y.shape[0])).backward()

    def captured(self) -> Callable[[], None]:
        """The step replayed as one CUDA graph (on a GPU): a call replays it and waits."""
        self()  # warms up and makes the gradients, which the graph accumulates into
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.forward_backward(autocast_cache=False)

        def replay() -> None:
            self.model.zero_grad(set_to_none=False)
            graph.replay()
            torch.cuda.synchronize(self.device)

        return replay
