"""acorn's GNN stage configuration translated into a partgnn run config.

acorn (GNN4ITkTeam/CommonFramework) trains its edge classifier from a YAML of flat keys
(``gnn_train.yaml``: ``model: InteractionGNN2``, ``hidden``, ``n_graph_iters``,
``node_features`` with ``node_scales``, ``edge_features``, ``weighting``, ``lr``...).
:func:`translate_acorn_config` maps each key onto partgnn's sections (:class:`~partgnn.train.
config.TrainConfig`) and says, one line per key, what it does not honour and why; a key that
means nothing to acorn's GNN stage, or a value partgnn cannot train at all (another model
class, an unknown activation, a weighting that gives fake edges no weight), is refused.

What maps (acorn -> partgnn):

- the model: ``hidden``, ``n_graph_iters`` -> ``model.steps``, the MLPs' layer counts ->
  ``model.mlp_layers`` (one count for all), ``layernorm`` / ``batchnorm``, ``hidden_activation``
  -> ``model.activation``, ``concat`` -> ``model.concat_initial``, ``*_net_recurrent`` ->
  ``model.shared_weights``, ``checkpointing`` -> ``model.recompute``, ``aggregation``; acorn's
  networks add no residual (``model.residual: false``);
- the inputs: ``node_features`` with ``node_scales`` -> ``data.node_features`` (partgnn's own
  ``r``, ``phi``, ``z``, ``eta``, ``x``, ``y`` in mm and rad as acorn's files hold them, any
  other name a field the graphs file keeps: ``cluster_r_1``...); ``edge_features`` ->
  ``data.edge_features`` at the scales acorn's edge features have, which it computes from the
  scaled node features (``dr`` is ``delta r / s_r``, ``phislope`` ``(delta phi / s_phi) /
  (delta r / s_r)``, ``rphislope`` partgnn's ``rphi_slope`` / ``s_phi``);
- the loss: ``weighting`` -> ``loss`` (weights relative to a fake edge's: partgnn divides by
  the weights' sum, so one factor on all weights changes nothing; a target is a true edge of
  ``pT >= target_pt``);
- the optimizer: ``lr``, ``max_epochs`` -> ``optim.epochs``, ``lr_weight_decay``, ``warmup``
  and ``patience`` (epochs, as steps of the ``data_split`` training events: one event per step),
  ``factor`` -> ``optim.schedule: step``;
- the run: ``stage_dir`` -> ``run.dir``, ``accelerator`` -> ``run.device``, ``data_split``'s
  validation events -> ``data.val_events``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from partgnn.data.graphs.graph_features import MIN_DR
from partgnn.errors import InputError

#: acorn's model classes partgnn's Interaction Network stands for.
MODELS = ("InteractionGNN", "InteractionGNN2")
#: acorn's activation names -> partgnn's.
ACTIVATIONS = {"ReLU": "relu", "SiLU": "silu", "GELU": "gelu", "Tanh": "tanh",
               "LeakyReLU": "leaky_relu"}  # fmt: skip
#: acorn's aggregations partgnn has (a list of them in acorn's order).
AGGREGATIONS = {("sum",): "sum", ("mean",): "mean", ("max",): "max", ("sum", "max"): "sum_max"}
#: acorn's node features that are partgnn's own columns (mm, rad, as acorn's files hold them).
OWN_NODE_NAMES = ("r", "phi", "z", "eta", "x", "y")
#: acorn's edge features -> partgnn's columns.
EDGE_NAMES = {"dr": "dr", "dphi": "dphi", "dz": "dz", "deta": "deta", "phislope": "phi_slope",
              "rphislope": "rphi_slope"}  # fmt: skip
#: The MLP layer counts of acorn's two models (the first present is partgnn's ``mlp_layers``).
LAYER_KEYS = (
    "n_edge_net_layers", "nb_edge_layer", "n_node_net_layers", "nb_node_layer",
    "n_node_encoder_layers", "n_edge_encoder_layers", "n_node_decoder_layers",
    "n_edge_decoder_layers",
)  # fmt: skip
#: acorn keys of the pipeline around the model, with what partgnn does instead.
ELSEWHERE = {
    "stage": "partgnn trains the edge classifier (the stage this file configures)",
    "input_dir": "import acorn's files with `partgnn import-acorn DIR --out GRAPHS.h5` and "
    "set data.graphs (from-acorn --graphs GRAPHS.h5 does)",
    "project": "a logging project: partgnn names a run by run.dir",
    "devices": "launch ranks with torchrun --nproc-per-node (partgnn splits one graph over them)",
    "nodes": "launch ranks with torchrun --nnodes",
    "num_workers": "partgnn reads events one step ahead itself",
    "debug": "no debug mode in partgnn",
    "dataset_class": "partgnn reads its graphs files",
    "edge_cut": "partgnn chooses its score cut on the validation events (run.cut_beta); "
    "evaluate --cut sets one",
    "hard_cuts": "partgnn cuts when graphs are built (build-graphs --pt-min; import-acorn "
    "keeps every edge)",
    "max_training_graph_size": "partgnn splits a graph too large for one device over ranks "
    "instead (partgnn plan --memory-gb says how many)",
    "min_lr": "acorn's StepLR does not read it",
    "metric_mode": "used by ReduceLROnPlateau only, which partgnn does not have",
    "metric_to_monitor": "used by ReduceLROnPlateau only, which partgnn does not have",
    "ratio": "acorn's Filter stage subsamples edges by it; its GNN stage does not read it",
    "spatial_channels": "the older schema's input width: partgnn's inputs are named "
    "(data.node_features; r, phi, z by default)",
    "cell_channels": "the older schema's cell-feature width: partgnn's inputs are named "
    "(data.node_features)",
    "truth_key": "partgnn's truth is its graphs' y, its targets the true edges above "
    "loss.target_pt",
    "train_purity": "the older schema's purity-driven edge sampling: partgnn trains on every edge",
    "mask_background": "partgnn leaves true edges of non-target particles out of the loss with "
    "loss.nontarget_weight 0 (the default) when loss.target_pt is set",
}


@dataclass
class Translation:
    """A translated config and what was not honoured.

    Attributes:
        config: The partgnn run config (sections as a YAML file has them).
        notes: One line per acorn key not honoured, ``KEY: why``.
    """

    config: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def translate_acorn_config(
    acorn: Mapping[str, Any], *, where: str, pt_unit: str = "MeV", graphs: str | None = None
) -> Translation:
    """Translates acorn's GNN stage configuration ``acorn`` into a partgnn run config.

    Args:
        acorn: The YAML's mapping.
        where: The file, for messages.
        pt_unit: The unit of ``pt`` in the weighting conditions (acorn's ITk files: MeV;
            TrackML-based ones: GeV), as ``import-acorn --pt-unit``.
        graphs: The graphs file to train on (``data.graphs``), if known.

    Raises:
        InputError: A key that means nothing to acorn's GNN stage, another model class, an
            unknown activation, a bad list, or a weighting partgnn cannot train (one line
            naming ``where`` and the key).
    """
    if not isinstance(acorn, Mapping):
        raise InputError(f"{where}: not a mapping of acorn's settings")
    unknown = [k for k in acorn if k not in HANDLED and k not in ELSEWHERE]
    if unknown:
        raise InputError(
            f"{where}: {unknown[0]}: not a setting of acorn's GNN stage partgnn knows (a typo, "
            "or another stage's file): remove it"
        )
    # (the older schema names the class model_name)
    model = acorn.get("model", acorn.get("model_name"))
    if model not in MODELS:
        raise InputError(
            f"{where}: model {model!r}: partgnn trains an Interaction Network "
            f"({' or '.join(MODELS)})"
        )
    result = Translation(
        {
            "mode": "full",
            "data": {} if graphs is None else {"graphs": graphs},
            "model": {},
            "loss": {},
            "optim": {},
            "run": {},
        }
    )
    context = _Context(acorn, where, pt_unit, result, model)
    for key in acorn:
        if key in ELSEWHERE:
            result.notes.append(f"{key}: not translated: {ELSEWHERE[key]}")
        else:
            handler = HANDLED[key]
            if handler is not None:
                handler(context, acorn[key])
    _model_defaults(context)
    _schedule(context)
    return result


@dataclass
class _Context:
    acorn: Mapping[str, Any]
    where: str
    pt_unit: str
    result: Translation
    model: str

    @property
    def config(self) -> dict[str, Any]:
        return self.result.config

    def note(self, line: str) -> None:
        self.result.notes.append(line)

    def fail(self, key: str, why: str) -> InputError:
        return InputError(f"{self.where}: {key}: {why}")


def _number(context: _Context, key: str, value: Any, *, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise context.fail(key, f"must be a number (got {value!r})")
    if positive and value <= 0:
        raise context.fail(key, f"must be > 0 (got {value!r})")
    return float(value)


def _count(context: _Context, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise context.fail(key, f"must be a whole number >= 1 (got {value!r})")
    return value


def _flag(context: _Context, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise context.fail(key, f"must be true or false (got {value!r})")
    return value


# --- the model ---


def _hidden(context: _Context, value: Any) -> None:
    context.config["model"]["hidden"] = _count(context, "hidden", value)


def _graph_iters(context: _Context, value: Any) -> None:
    context.config["model"]["steps"] = _count(context, "n_graph_iters", value)


def _layers(context: _Context) -> None:
    """Every layer count: the first present is ``mlp_layers``; others that differ are noted."""
    counts = {k: _count(context, k, context.acorn[k]) for k in LAYER_KEYS if k in context.acorn}
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


def _norm(context: _Context) -> None:
    """``layernorm`` and ``batchnorm``, and their output-layer settings."""
    layer = _flag(context, "layernorm", context.acorn.get("layernorm", False))
    batch = _flag(context, "batchnorm", context.acorn.get("batchnorm", False))
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


def _head_norm(context: _Context, value: Any, *, key: str) -> None:
    if _flag(context, key, value):
        context.note(f"{key}: not honoured: partgnn's output layer is a plain linear layer")


def _running_stats(context: _Context, value: Any, *, key: str) -> None:
    if _flag(context, key, value):
        context.note(f"{key}: not honoured: partgnn's BatchNorm normalises with the whole "
                     "event graph's statistics in training and scoring alike")  # fmt: skip


def _activation(context: _Context, value: Any) -> None:
    if value not in ACTIVATIONS:
        raise context.fail("hidden_activation", f"{value!r}: partgnn has {', '.join(ACTIVATIONS)}")
    context.config["model"]["activation"] = ACTIVATIONS[value]


def _output_activation(context: _Context, value: Any) -> None:
    hidden = context.acorn.get("hidden_activation")
    if value is not None and value != hidden:
        context.note(f"output_activation: not honoured: partgnn's MLPs end with their hidden "
                     f"activation ({hidden}), not {value}")  # fmt: skip


def _final_activation(context: _Context, value: Any) -> None:
    if value is not None:
        context.note("edge_output_transform_final_activation: not honoured: partgnn's output "
                     "layer gives logits")  # fmt: skip


def _concat(context: _Context, value: Any) -> None:
    context.config["model"]["concat_initial"] = _flag(context, "concat", value)


def _recurrent(context: _Context) -> None:
    """``node_net_recurrent`` and ``edge_net_recurrent``: acorn's InteractionGNN shares its
    networks over the iterations unless told otherwise."""
    default = context.model == "InteractionGNN"
    node = _flag(context, "node_net_recurrent", context.acorn.get("node_net_recurrent", default))
    edge = _flag(context, "edge_net_recurrent", context.acorn.get("edge_net_recurrent", default))
    context.config["model"]["shared_weights"] = edge
    if node != edge:
        context.note(f"node_net_recurrent: not honoured: partgnn shares the node and edge "
                     f"networks over the steps alike (model.shared_weights {edge}, from "
                     "edge_net_recurrent)")  # fmt: skip


def _in_out(context: _Context, value: Any) -> None:
    if not _flag(context, "in_out_diff_agg", value):
        context.note("in_out_diff_agg: not honoured: partgnn's nodes read their incoming and "
                     "outgoing edges apart (acorn's true)")  # fmt: skip


def _checkpointing(context: _Context, value: Any) -> None:
    context.config["model"]["recompute"] = _flag(context, "checkpointing", value)


def _aggregation(context: _Context, value: Any) -> None:
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


def _emb_channels(context: _Context, value: Any) -> None:
    if value:
        context.note("emb_channels: not honoured: partgnn's model has no embedding channels")


def _undirected(context: _Context, value: Any) -> None:
    if _flag(context, "undirected", value):
        context.note(
            "undirected: not honoured: partgnn's edges run inner to outer, each once (acorn's "
            "true adds every edge reversed and averages the two scores)"
        )


def _model_defaults(context: _Context) -> None:
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


# --- the inputs ---


def _node_features(context: _Context, value: Any) -> None:
    names = _names(context, "node_features", value)
    scales = context.acorn.get("node_scales")
    if scales is None:
        scales = [1.0] * len(names)
    if not isinstance(scales, list) or len(scales) != len(names):
        raise context.fail(
            "node_scales", f"one scale for each of the {len(names)} node_features (got {scales!r})"
        )
    columns = []
    for name, scale in zip(names, scales, strict=True):
        scale = _number(context, f"node_scales ({name})", scale, positive=False)
        if scale == 0:
            raise context.fail("node_scales", f"the scale of {name} is 0")
        columns.append({name: scale})
    context.config["data"]["node_features"] = columns


def _node_scales(context: _Context, value: Any) -> None:
    if "node_features" not in context.acorn:
        raise context.fail("node_scales", "given without node_features")


def _edge_features(context: _Context, value: Any) -> None:
    if value is None or value == "None":
        return
    names = _names(context, "edge_features", value)
    node = dict(zip(context.acorn.get("node_features") or [],
                    context.acorn.get("node_scales") or [], strict=False))  # fmt: skip
    s_r, s_phi = float(node.get("r", 1.0)), float(node.get("phi", 1.0))
    scales = {
        "dr": s_r, "dphi": s_phi, "dz": float(node.get("z", 1.0)),
        "deta": float(node.get("eta", 1.0)), "phislope": s_phi / s_r, "rphislope": s_phi,
    }  # fmt: skip
    columns = [{EDGE_NAMES.get(name, name): scales.get(name, 1.0)} for name in names]
    context.config["data"]["edge_features"] = columns
    if "phislope" in names or "rphislope" in names:
        context.note(
            "phislope: acorn clamps it to +-100 (0 where dr is 0), partgnn floors |dr| at "
            f"{MIN_DR:g} mm instead: they differ on the edges of the smallest |dr| only"
        )


def _names(context: _Context, key: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise context.fail(key, f"must be a list of names (got {value!r})")
    return list(value)


# --- the loss ---


def _weighting(context: _Context, value: Any) -> None:
    """acorn's rules, in order, each setting the weight of the edges its conditions select (true
    edges 0 and fake ones 1 before any): partgnn's fake, target and non-target weights."""
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise context.fail("weighting", "must be a list of {weight, conditions} mappings")
    weights = {"fake": 1.0, "target": 0.0, "other": 0.0}
    target_pt = None
    for index, rule in enumerate(value):
        where = f"weighting[{index}]"
        weight = _number(context, f"{where}.weight", rule.get("weight"), positive=False)
        conditions = dict(rule.get("conditions") or {})
        truth = conditions.pop("y", None)
        pt = conditions.pop("pt", None)
        for name, condition in conditions.items():
            context.note(f"{where}.conditions.{name} {condition}: not honoured: partgnn's "
                         "targets are the true edges above a pT (loss.target_pt)")  # fmt: skip
        if truth is False:
            if pt is not None:
                context.note(f"{where}.conditions.pt: not honoured on fake edges")
            weights["fake"] = weight
            continue
        if truth is not True:
            context.note(f"{where}: not honoured: a rule without y True or False")
            continue
        if pt is None:
            weights["target"] = weights["other"] = weight
            continue
        low = _pt_floor(context, f"{where}.conditions.pt", pt)
        if target_pt is not None and low != target_pt:
            context.note(f"{where}.conditions.pt: not honoured: partgnn has one target pT "
                         f"({target_pt} GeV, from an earlier rule)")  # fmt: skip
        target_pt = low if target_pt is None else target_pt
        weights["target"] = weight
    if weights["fake"] <= 0:
        raise context.fail("weighting", "fake edges (y False) weigh 0: partgnn's loss needs them")
    loss = context.config["loss"]
    loss["pos_weight"] = weights["target"] / weights["fake"]
    loss["target_pt"] = target_pt
    loss["nontarget_weight"] = weights["other"] / weights["fake"]
    if target_pt is None:  # every true edge alike
        loss["nontarget_weight"] = 0.0
    context.note("weighting: translated relative to a fake edge's weight; acorn divides the "
                 "loss by the edges of non-zero weight, partgnn by their weights' sum (a "
                 "factor per event)")  # fmt: skip


def _pt_floor(context: _Context, key: str, condition: Any) -> float:
    """The lower bound [GeV] of a ``[low, .inf]`` pT condition."""
    from partgnn.data.formats.acorn import PT_UNITS

    if (
        not isinstance(condition, list)
        or len(condition) != 2
        or not all(isinstance(v, (int, float)) for v in condition)
    ):
        raise context.fail(key, f"a [low, high] range (got {condition!r})")
    low, high = condition
    if math.isfinite(high):
        context.note(f"{key}: not honoured: partgnn's targets have no upper pT ({high})")
    return float(low) * PT_UNITS[context.pt_unit]


# --- the optimizer and the run ---


def _lr(context: _Context, value: Any) -> None:
    context.config["optim"]["lr"] = _number(context, "lr", value)


def _epochs(context: _Context, value: Any) -> None:
    context.config["optim"]["epochs"] = _count(context, "max_epochs", value)


def _weight_decay(context: _Context, value: Any) -> None:
    context.config["optim"]["weight_decay"] = _number(
        context, "lr_weight_decay", value, positive=False
    )


def _scheduler(context: _Context, value: Any) -> None:
    if value not in (None, "StepLR"):
        context.note(f"scheduler {value}: not honoured: partgnn has StepLR's steps "
                     "(optim.schedule step), a cosine or a constant rate")  # fmt: skip


def _schedule(context: _Context) -> None:
    """``warmup`` and ``patience`` are epochs in acorn: steps here, one training event each."""
    acorn, optim = context.acorn, context.config["optim"]
    optim.setdefault("weight_decay", 0.01)  # acorn's AdamW default
    optim["grad_clip"] = None
    context.note("optimizer: acorn's AdamW has amsgrad on, partgnn's off")
    split = acorn.get("data_split")
    events = split[0] if isinstance(split, list) and split else None
    per_epoch = events if isinstance(events, int) and events > 0 else None
    warmup = acorn.get("warmup")
    if warmup is not None:
        warmup = _count(context, "warmup", warmup) if warmup else 0
    if acorn.get("scheduler") not in (None, "StepLR"):
        optim["schedule"] = "constant"
    elif "patience" in acorn or "factor" in acorn:
        optim["schedule"] = "step"
        optim["decay_factor"] = _number(context, "factor", acorn.get("factor", 0.1))
        patience = _count(context, "patience", acorn.get("patience", 1))
        if per_epoch is None:
            raise context.fail("data_split", "needed (its training events make an epoch's steps "
                                             "for patience and warmup)")  # fmt: skip
        optim["decay_steps"] = patience * per_epoch
    else:
        optim["schedule"] = "constant"
    if warmup:
        if per_epoch is None:
            raise context.fail("data_split", "needed (its training events make an epoch's steps "
                                             "for warmup)")  # fmt: skip
        optim["warmup_steps"] = warmup * per_epoch
    else:
        optim["warmup_steps"] = 0


def _data_split(context: _Context, value: Any) -> None:
    if (
        not isinstance(value, list)
        or len(value) != 3
        or not all(isinstance(v, int) and v >= 0 for v in value)
    ):
        raise context.fail("data_split", f"[training, validation, testing] counts (got {value!r})")
    context.config["data"]["val_events"] = value[1]
    context.note(
        f"data_split: {value[1]} validation events, the last of the graphs file; the "
        f"{value[2]} testing events are scored apart (partgnn infer and evaluate)"
    )


def _stage_dir(context: _Context, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise context.fail("stage_dir", f"a folder (got {value!r})")
    context.config["run"]["dir"] = value


def _accelerator(context: _Context, value: Any) -> None:
    devices = {"gpu": "cuda", "cuda": "cuda", "cpu": "cpu", "auto": "auto"}
    if value not in devices:
        raise context.fail("accelerator", f"{value!r}: gpu, cpu or auto")
    context.config["run"]["device"] = devices[value]


def _model(context: _Context, value: Any) -> None:
    """Checked before the keys are read."""


def _weight(context: _Context, value: Any) -> None:
    """The older schema's weight of true edges (BCE's pos_weight), where no weighting says."""
    if "weighting" not in context.acorn:
        context.config["loss"]["pos_weight"] = _number(context, "weight", value)


#: Each acorn key this module reads, and how (``None``: read together with others after the
#: keys, by :func:`_model_defaults` or :func:`_schedule`).
HANDLED: dict[str, Callable[..., None] | None] = {
    "model": _model,
    "model_name": _model,
    "weight": _weight,
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
    "node_features": _node_features,
    "node_scales": _node_scales,
    "edge_features": _edge_features,
    "weighting": _weighting,
    "lr": _lr,
    "max_epochs": _epochs,
    "lr_weight_decay": _weight_decay,
    "scheduler": _scheduler,
    "warmup": None,
    "patience": None,
    "factor": None,
    "data_split": _data_split,
    "stage_dir": _stage_dir,
    "accelerator": _accelerator,
}
