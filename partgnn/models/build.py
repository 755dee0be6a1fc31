"""The model a run config names: the built-in Interaction Network or one's own ``nn.Module``.

A config names its own model with ``model.target: package.module:Class`` and passes
``model.kwargs`` to it; the class is built as ``Class(node_features=F_node,
edge_features=F_edge, **kwargs)`` and must follow the model contract of docs/MODEL_CONTRACT.md:

- ``forward(x, edge_index, edge_attr, *, exchange=None, n_owned=None) -> logits (E_local,)``;
- node rows ``[0, n_owned)`` are the owned nodes; only they are read, and a node's halo copy is
  obtained by calling ``exchange(h_owned) -> [h_owned; h_halo]`` (``None`` on a whole graph);
- ``exchange`` is a collective: every rank calls it the same number of times in the same order;
- an optional ``input_scaler`` attribute (:class:`~partgnn.models.input_scaler.InputScaler`)
  receives the training set's feature standardisation.

Checkpoints record the target and its keyword arguments, so ``partgnn infer`` rebuilds the same
model; the module must be importable there too.
"""

from __future__ import annotations

import importlib
import inspect
from typing import TYPE_CHECKING, Any

from torch import nn

from partgnn.errors import InputError, first_line
from partgnn.memory.heap_release import DEFAULT_HEAP_RELEASE, HeapReleasePolicy
from partgnn.models.cpu_kernels import load_kernels
from partgnn.models.interaction_network import InteractionNetwork

if TYPE_CHECKING:
    from partgnn.models.config import ModelConfig


def build_model(
    config: ModelConfig,
    node_features: int,
    edge_features: int,
    *,
    heap_release: HeapReleasePolicy = DEFAULT_HEAP_RELEASE,
) -> nn.Module:
    """The model a model config describes, for inputs of the given widths.

    Args:
        config: ``model`` section of a run config. Without ``target``, the Interaction Network
            of its hyper-parameters; with one, that class built with ``kwargs``.
        node_features: Width ``F_node`` of the node inputs.
        edge_features: Width ``F_edge`` of the edge inputs.
        heap_release: When the Interaction Network's recomputed edge MLPs give freed C-heap
            pages back (a model of one's own manages its own memory).

    Raises:
        InputError: The target cannot be imported, is not an ``nn.Module`` class, or refuses
            its arguments (one line naming ``model.target``); ``model.fused`` and its kernel
            cannot be built.
    """
    if config.target is None:
        if config.fused:
            # Built (once per machine) or loaded now, not inside the first training step, and
            # a missing compiler stops here in one line.
            load_kernels()
        return InteractionNetwork(
            node_features=node_features,
            edge_features=edge_features,
            architecture=config.architecture(),
            compute=config.compute_policy(heap_release),
        )
    cls = import_target(config.target)
    try:
        model = cls(node_features=node_features, edge_features=edge_features, **config.kwargs)
    except TypeError as err:
        raise InputError(
            f"model.target {config.target}: cannot build it with node_features, edge_features "
            f"and model.kwargs {sorted(config.kwargs)} ({first_line(err)})"
        ) from None
    if not isinstance(model, nn.Module):
        raise InputError(f"model.target {config.target}: built a {type(model).__name__}, "
                         "not a torch.nn.Module")  # fmt: skip
    return model


def import_target(target: str) -> type[nn.Module]:
    """The class ``package.module:Class`` names.

    Raises:
        InputError: Not of that form, not importable, or not an ``nn.Module`` subclass.
    """
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise InputError(f"model.target {target!r}: expected package.module:Class")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise InputError(f"model.target {target}: cannot import {module_name} ({err})") from None
    obj: Any = module
    for part in attribute.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise InputError(f"model.target {target}: {module_name} has no {attribute}")
    if not (inspect.isclass(obj) and issubclass(obj, nn.Module)):
        raise InputError(f"model.target {target}: {attribute} is not a torch.nn.Module class")
    return obj
