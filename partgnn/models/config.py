"""The ``model`` section of a run config: what :func:`~partgnn.models.build.build_model` builds.

What the built-in model computes is its :class:`Architecture`; how it computes it is a
:class:`~partgnn.models.compute_policy.ComputePolicy` made from the section's ``recompute`` and
``fused`` (:meth:`ModelConfig.compute_policy`). Its allowed values (activations, aggregations)
are the types the model code defines, so the config cannot offer a choice the model does not
have. Settings renamed since a config or checkpoint was written are read under their new name
(:data:`RENAMED_SETTINGS`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from partgnn.memory.heap_release import DEFAULT_HEAP_RELEASE, HeapReleasePolicy
from partgnn.models.compute_policy import ComputePolicy
from partgnn.models.edge_aggregation import Aggregation
from partgnn.models.mlp import Activation

#: Model settings renamed: old name -> new name (an old config or checkpoint is read as new).
RENAMED_SETTINGS: dict[str, str] = {"checkpoint": "recompute"}


@dataclass
class Architecture:
    """What the Interaction Network computes: its hyper-parameters
    (:class:`~partgnn.models.interaction_network.InteractionNetwork`). A new option is a field
    here and its use there.

    Attributes:
        hidden: Latent width ``H``.
        steps: Message-passing steps.
        mlp_layers: Linear layers per MLP.
        activation: Activation name (see :data:`partgnn.models.mlp.ACTIVATIONS`).
        aggregation: How incoming and outgoing edge latents are reduced at a node: ``sum``,
            ``mean``, ``max`` or ``sum_max`` (sum and max concatenated).
        shared_weights: One edge MLP and one node MLP for all steps (else one per step).
        residual: Add each update to the previous latent.
        layer_norm: LayerNorm in every MLP layer.
        batch_norm: BatchNorm after every hidden MLP layer instead, with the statistics of the
            whole event graph's edges or nodes also when ranks hold parts of it (the reference
            pipeline's norm; :class:`~partgnn.models.graph_batch_norm.GraphBatchNorm`); needs
            ``layer_norm: false``.
        concat_initial: Every step's edge and node MLPs also see the initial encodings of the
            edges and nodes (the reference pipeline's ``concat``).
    """

    hidden: int = 64
    steps: int = 6
    mlp_layers: int = 2
    activation: Activation = "relu"
    aggregation: Aggregation = "sum"
    shared_weights: bool = False
    residual: bool = True
    layer_norm: bool = True
    batch_norm: bool = False
    concat_initial: bool = False


@dataclass
class ModelConfig(Architecture):
    """The model: the built-in Interaction Network's :class:`Architecture` and how it is
    computed, or one's own class.

    Attributes:
        target: ``package.module:Class`` of one's own ``nn.Module`` (docs/MODEL_CONTRACT.md),
            built as ``Class(node_features=..., edge_features=..., **kwargs)``; ``None``: the
            Interaction Network of the architecture fields, which a ``target`` ignores.
        kwargs: Keyword arguments of ``target`` (``--set model.kwargs.hidden=32``).
        recompute: Activation recomputation (:attr:`ComputePolicy.recompute`; formerly
            ``model.checkpoint``). The same model computed in less memory: a checkpoint resumes
            and scores either way.
        fused: LayerNorm and activation in one pass per row (on CPUs a C++ kernel compiled
            once per machine on first use, on GPUs ``torch.compile``;
            :attr:`ComputePolicy.fused`). The same model computed faster: a checkpoint
            resumes and scores either way.
        chunk_mb: With ``recompute``, the memory [MB, 10^6 bytes] one chunk of edges of an edge
            MLP may take (:attr:`ComputePolicy.chunk_bytes`): the largest chunk that fits, one
            per MLP when the whole MLP does (fewest kernel launches); ``null``: the device's
            default (a quarter of a GPU's memory; 16 chunks per event on a CPU). The same
            model computed in other pieces: a checkpoint resumes and scores either way.
        skip_unconnected: Leave the nodes that no edge touches out of the training steps
            (about half of a full event graph's hits; :mod:`partgnn.train.items.unconnected_nodes`):
            nothing computed for them reaches an edge. Only where that holds
            (:attr:`skips_unconnected_nodes`). The same model computed on fewer rows: a
            checkpoint resumes and scores either way.
    """

    target: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    recompute: bool = False
    fused: bool = False
    chunk_mb: float | None = None
    skip_unconnected: bool = True

    def architecture(self) -> Architecture:
        """What the built-in model computes (the :class:`Architecture` fields)."""
        return Architecture(
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(Architecture)}
        )

    @property
    def skips_unconnected_nodes(self) -> bool:
        """Whether the training steps leave out the nodes that no edge touches: with
        ``skip_unconnected``, where that changes no edge's logit. The built-in Interaction
        Network computes a node's state from its own row and its edges' messages, except with
        ``batch_norm``, whose statistics count every node; a ``target`` model may read any
        node."""
        return self.skip_unconnected and self.target is None and not self.batch_norm

    def compute_policy(
        self, heap_release: HeapReleasePolicy = DEFAULT_HEAP_RELEASE
    ) -> ComputePolicy:
        """How the built-in model computes (:class:`ComputePolicy`)."""
        chunk_bytes = None if self.chunk_mb is None else int(self.chunk_mb * 1e6)
        return ComputePolicy(
            recompute=self.recompute, fused=self.fused, heap_release=heap_release,
            chunk_bytes=chunk_bytes,
        )  # fmt: skip


#: Model settings that change how the model is computed, not what: a run resumes across them
#: and starts from (``run.init_from``) a checkpoint saved with other values.
COMPUTE_ONLY_SETTINGS: tuple[str, ...] = ("recompute", "fused", "chunk_mb", "skip_unconnected")


def renamed_settings(
    settings: dict[str, Any], renamed: dict[str, str] = RENAMED_SETTINGS, section: str = "model"
) -> tuple[dict[str, Any], list[str]]:
    """``settings`` (a config section, by default ``model``) with renamed keys under their new
    names (``renamed``: old -> new, by default :data:`RENAMED_SETTINGS`), and the old names
    found.

    Raises:
        ValueError: A setting is given under both names.
    """
    found = [old for old in renamed if old in settings]
    current = dict(settings)
    for old in found:
        new = renamed[old]
        if new in current:
            raise ValueError(
                f"{section}.{old} and {section}.{new} are one setting (renamed): give one"
            )
        current[new] = current.pop(old)
    return current, found
