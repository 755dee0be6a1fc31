"""The ``model`` section of a run config: what :func:`~partgnn.models.build.build_model` builds.

Its allowed values (activations, aggregations) are the types the model code defines, so the
config cannot offer a choice the model does not have.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from partgnn.models.edge_aggregation import Aggregation
from partgnn.models.mlp import Activation


@dataclass
class ModelConfig:
    """The model: the built-in Interaction Network's hyper-parameters, or one's own class.

    Attributes:
        target: ``package.module:Class`` of one's own ``nn.Module`` (docs/MODEL_CONTRACT.md),
            built as ``Class(node_features=..., edge_features=..., **kwargs)``; ``None``: the
            Interaction Network (:class:`~partgnn.models.interaction_network.InteractionNetwork`)
            of the fields below, which a ``target`` ignores.
        kwargs: Keyword arguments of ``target`` (``--set model.kwargs.hidden=32``).
        fused: LayerNorm and activation in one pass per row on CPUs (a C++ kernel compiled
            once per machine on first use; :mod:`~partgnn.models.fused_norm_activation`).
            The same model computed faster: a checkpoint resumes and scores either way.
    """

    target: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)

    hidden: int = 64
    steps: int = 6
    mlp_layers: int = 2
    activation: Activation = "relu"
    aggregation: Aggregation = "sum"
    shared_weights: bool = False
    residual: bool = True
    layer_norm: bool = True
    checkpoint: bool = False
    fused: bool = False
