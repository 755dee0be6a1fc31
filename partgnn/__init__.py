"""partgnn: graph-parallel training of GNNs on particle-physics event graphs.

Each event graph is split into partitions; each rank holds one partition plus its halo, and
boundary embeddings are exchanged at every message-passing step, so training is exactly the
full-graph computation. See ``README.md`` and ``docs/USER_GUIDE.md``.

The main entry points are attributes of this package, imported on first use (so that
``import partgnn`` and the command line start at once)::

    import partgnn
    with partgnn.distributed_session() as context:            # under torchrun / mpirun / srun
        plans = partgnn.partition_event(graph, context.group_size)
        part = partgnn.local_graph(graph, plans[context.group_rank])
        exchange = partgnn.make_exchange(plans[context.group_rank], context)
        logits = model(part.x, part.edge_index, part.edge_attr, exchange=exchange)

    partgnn.fit("halo", overrides=["data.shards=data/shards-metis2"])   # a whole run

A model of one's own follows docs/MODEL_CONTRACT.md; PyG layers run on a partition through
:class:`PartitionedLayer`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from partgnn.version import __version__

#: Public name -> module that defines it.
_EXPORTS: dict[str, str] = {
    # distributed set-up and the exchange
    "init_distributed": "partgnn.distributed.process_group",
    "destroy_distributed": "partgnn.distributed.process_group",
    "distributed_session": "partgnn.distributed.session",
    "DistContext": "partgnn.distributed.context",
    "HaloExchanger": "partgnn.distributed.halo_exchange",
    # partitioning
    "partition_event": "partgnn.api",
    "local_graph": "partgnn.api",
    "make_exchange": "partgnn.api",
    "HaloPlan": "partgnn.partition.halo_plan",
    "PartitionOptions": "partgnn.partition.event_split",
    "write_shards": "partgnn.partition.shard_writer",
    "ShardDirectory": "partgnn.partition.shard_reader",
    # models
    "InteractionNetwork": "partgnn.models.interaction_network",
    "PartitionedLayer": "partgnn.models.partitioned_layer",
    "build_model": "partgnn.models.build",
    # training
    "owned_edge_loss": "partgnn.api",
    "sum_gradients": "partgnn.api",
    "fit": "partgnn.api",
    "TrainConfig": "partgnn.train.config.sections",
    "load_config": "partgnn.train.config.config_file",
    "Trainer": "partgnn.train.trainer",
    # workflows
    "evaluate_pretrained": "partgnn.workflows.pretrained_evaluation",
    "PretrainedEvaluation": "partgnn.workflows.pretrained_evaluation",
    "selfcheck": "partgnn.workflows.selfcheck",
    "SelfcheckResult": "partgnn.workflows.selfcheck",
    # errors
    "InputError": "partgnn.errors",
    "PeerFailure": "partgnn.errors",
}

__all__ = [
    "DistContext",
    "HaloExchanger",
    "HaloPlan",
    "InputError",
    "InteractionNetwork",
    "PartitionOptions",
    "PartitionedLayer",
    "PeerFailure",
    "PretrainedEvaluation",
    "SelfcheckResult",
    "ShardDirectory",
    "TrainConfig",
    "Trainer",
    "__version__",
    "build_model",
    "destroy_distributed",
    "distributed_session",
    "evaluate_pretrained",
    "fit",
    "init_distributed",
    "load_config",
    "local_graph",
    "make_exchange",
    "owned_edge_loss",
    "partition_event",
    "selfcheck",
    "sum_gradients",
    "write_shards",
]

if TYPE_CHECKING:
    from partgnn.api import (
        fit,
        local_graph,
        make_exchange,
        owned_edge_loss,
        partition_event,
        sum_gradients,
    )
    from partgnn.distributed.context import DistContext
    from partgnn.distributed.halo_exchange import HaloExchanger
    from partgnn.distributed.process_group import destroy_distributed, init_distributed
    from partgnn.distributed.session import distributed_session
    from partgnn.errors import InputError, PeerFailure
    from partgnn.models.build import build_model
    from partgnn.models.interaction_network import InteractionNetwork
    from partgnn.models.partitioned_layer import PartitionedLayer
    from partgnn.partition.event_split import PartitionOptions
    from partgnn.partition.halo_plan import HaloPlan
    from partgnn.partition.shard_reader import ShardDirectory
    from partgnn.partition.shard_writer import write_shards
    from partgnn.train.config.config_file import load_config
    from partgnn.train.config.sections import TrainConfig
    from partgnn.train.trainer import Trainer
    from partgnn.workflows.pretrained_evaluation import PretrainedEvaluation, evaluate_pretrained
    from partgnn.workflows.selfcheck import SelfcheckResult, selfcheck


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'partgnn' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
