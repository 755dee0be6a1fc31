"""acorn's model keys translated (:mod:`partgnn.train.config.acorn_config`): the width, steps and
layer counts, norms, activations, shared networks, aggregation and recomputation, each key's
handler in :data:`MODEL_KEYS`; :func:`model_defaults` reads the ones that go together."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from partgnn.train.config.acorn_keys import AcornContext, flag, whole_number

#: acorn's activation names -> partgnn's.
ACTIVATIONS = {"ReLU": "relu", "SiLU": "silu", "GELU": "gelu", "Tanh": "tanh",
               "LeakyReLU": "leaky_relu"}  # fmt: skip
#: acorn's aggregations partgnn has (a list of them in acorn's order).
AGGREGATIONS = {("sum",): "sum", ("mean",): "mean", ("max",): "max", ("sum", "max"): "sum_max"}
#: The MLP layer counts of acorn's two models (the first present is partgnn's ``mlp_layers``).
LAYER_KEYS = (
    "n_edge_net_layers", "nb_edge_layer", "n_node_net_layers", "nb_node_layer",
    "n_node_encoder_layers", "n_edge_encoder_layers", "n_node_decoder_layers",
    "n_edge_decoder_layers",
)  # fmt: skip


# --- the model ---


def _hidden(context: AcornContext, value: Any) -> None:
    context.config["model"]["hidden"] = whole_number(context, "hidden", value)


def _graph_iters(context: AcornContext, value: Any) -> None:
    context.config["model"]["steps"] = whole_number(context, "n_graph_iters", value)


def _layers(context: AcornContext) -> None:
    """Every layer count: the first present is ``mlp_layers``; others that differ are noted."""
    counts = {
        k: whole_number(context, k, context.acorn[k]) for k in LAYER_KEYS if k in context.acorn
    }
    if not counts:
        return
    first, layers = next(iter(counts.items()))
    context.config["model"]["mlp_layers"] = layers
    for key, count in counts.items():
        if count != layers:
            context.note(
                f"{key}: not honoured: partgnn gives every MLP the same {layers} layers "
                f"(model.mlp_layers, from {first}); acorn's has {count}"
            )


def _norm(context: AcornContext) -> None:
    """``layernorm`` and ``batchnorm``, and their output-layer settings."""
    layer = flag(context, "layernorm", context.acorn.get("layernorm", False))
    batch = flag(context, "batchnorm", context.acorn.get("batchnorm", False))
    if layer and batch:
        context.note("batchnorm: not honoured: partgnn normalises with LayerNorm or BatchNorm, "
                     "not both (layernorm kept)")  # fmt: skip
        batch = False
    context.config["model"].update(layer_norm=layer, batch_norm=batch)
    if layer and context.acorn.get("output_layer_norm") is False:
        context.note("output_layer_norm: not honoured: partgnn's hidden MLPs normalise after "
                     "their last layer too (acorn's false leaves it out)")  # fmt: skip
    if batch and context.acorn.get("output_batch_norm") is True:
        context.note("output_batch_norm: not honoured: partgnn's BatchNorm follows the hidden "
                     "layers only")  # fmt: skip


def _head_norm(context: AcornContext, value: Any, *, key: str) -> None:
    if flag(context, key, value):
        context.note(f"{key}: not honoured: partgnn's output layer is a plain linear layer")


def _running_stats(context: AcornContext, value: Any, *, key: str) -> None:
    if flag(context, key, value):
        context.note(f"{key}: not honoured: partgnn's BatchNorm normalises with the whole "
                     "event graph's statistics in training and scoring alike")  # fmt: skip


def _activation(context: AcornContext, value: Any) -> None:
    if value not in ACTIVATIONS:
        raise context.fail("hidden_activation", f"{value!r}: partgnn has {', '.join(ACTIVATIONS)}")
    context.config["model"]["activation"] = ACTIVATIONS[value]


def _output_activation(context: AcornContext, value: Any) -> None:
    hidden = context.acorn.get("hidden_activation")
    if value is not None and value != hidden:
        context.note(f"output_activation: not honoured: partgnn's MLPs end with their hidden "
                     f"activation ({hidden}), not {value}")  # fmt: skip


def _final_activation(context: AcornContext, value: Any) -> None:
    if value is not None:
        context.note("edge_output_transform_final_activation: not honoured: partgnn's output "
                     "layer gives logits")  # fmt: skip


def _concat(context: AcornContext, value: Any) -> None:
    context.config["model"]["concat_initial"] = flag(context, "concat", value)


def _recurrent(context: AcornContext) -> None:
    """``node_net_recurrent`` and ``edge_net_recurrent``: acorn's InteractionGNN shares its
    networks over the iterations unless told otherwise."""
    default = context.model == "InteractionGNN"
    node = flag(context, "node_net_recurrent", context.acorn.get("node_net_recurrent", default))
    edge = flag(context, "edge_net_recurrent", context.acorn.get("edge_net_recurrent", default))
    context.config["model"]["shared_weights"] = edge
    if node != edge:
        context.note(f"node_net_recurrent: not honoured: partgnn shares the node and edge "
                     f"networks over the steps alike (model.shared_weights {edge}, from "
                     "edge_net_recurrent)")  # fmt: skip


def _in_out(context: AcornContext, value: Any) -> None:
    if not flag(context, "in_out_diff_agg", value):
        context.note("in_out_diff_agg: not honoured: partgnn's nodes read their incoming and "
                     "outgoing edges apart (acorn's true)")  # fmt: skip


def _checkpointing(context: AcornContext, value: Any) -> None:
    context.config["model"]["recompute"] = flag(context, "checkpointing", value)


def _aggregation(context: AcornContext, value: Any) -> None:
    names = tuple([value] if isinstance(value, str) else value or ())
    if names in AGGREGATIONS:
        context.config["model"]["aggregation"] = AGGREGATIONS[names]
        return
    if not all(isinstance(n, str) for n in names) or not names:
        raise context.fail("aggregation", f"a name or a list of names (got {value!r})")
    taken = "sum_max" if {"sum", "max"} <= set(names) else "sum"
    context.config["model"]["aggregation"] = taken
    context.note(f"aggregation {list(names)}: not honoured: partgnn aggregates by sum, mean, "
                 f"max or sum and max ({taken} taken)")  # fmt: skip


def _emb_channels(context: AcornContext, value: Any) -> None:
    if value:
        context.note("emb_channels: not honoured: partgnn's model has no embedding channels")


def _undirected(context: AcornContext, value: Any) -> None:
    if flag(context, "undirected", value):
        context.note(
            "undirected: not honoured: partgnn's edges run inner to outer, each once (acorn's "
            "true adds every edge reversed and averages the two scores)"
        )


def model_defaults(context: AcornContext) -> None:
    """The settings read together (the layer counts, the norms, the shared networks, each with
    acorn's default when absent), and what acorn's models are whatever their settings: no
    residual."""
    _layers(context)
    _norm(context)
    _recurrent(context)
    model = context.config["model"]
    model["residual"] = False
    if context.model == "InteractionGNN2":
        context.note(
            "model InteractionGNN2: partgnn's edge head also reads the final node latents of "
            "both ends (acorn's reads the edge latents)"
        )
    if context.model == "InteractionGNN" and context.acorn.get("edge_features"):
        context.note("edge_features: InteractionGNN reads none (its edges are encoded from their "
                     "hits); partgnn's model reads the list")  # fmt: skip


#: Each model key's handler (``None``: read together with others after the keys, by
#: :func:`model_defaults`).
MODEL_KEYS: dict[str, Callable[[AcornContext, Any], None] | None] = {
    "hidden": _hidden,
    "n_graph_iters": _graph_iters,
    **dict.fromkeys(LAYER_KEYS),
    "layernorm": None,
    "batchnorm": None,
    "output_layer_norm": None,
    "output_batch_norm": None,
    "edge_output_transform_final_layer_norm": lambda c, v: _head_norm(
        c, v, key="edge_output_transform_final_layer_norm"
    ),
    "edge_output_transform_final_batch_norm": lambda c, v: _head_norm(
        c, v, key="edge_output_transform_final_batch_norm"
    ),
    "bn_track_running_stats": lambda c, v: _running_stats(c, v, key="bn_track_running_stats"),
    "track_running_stats": lambda c, v: _running_stats(c, v, key="track_running_stats"),
    "hidden_activation": _activation,
    "output_activation": _output_activation,
    "edge_output_transform_final_activation": _final_activation,
    "concat": _concat,
    "node_net_recurrent": None,
    "edge_net_recurrent": None,
    "in_out_diff_agg": _in_out,
    "checkpointing": _checkpointing,
    "aggregation": _aggregation,
    "emb_channels": _emb_channels,
    "undirected": _undirected,
}
