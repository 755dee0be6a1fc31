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

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from partgnn.errors import InputError
from partgnn.train.config.acorn_keys import AcornContext
from partgnn.train.config.acorn_model_keys import MODEL_KEYS, model_defaults
from partgnn.train.config.acorn_training_keys import TRAINING_KEYS, schedule

#: acorn's model classes partgnn's Interaction Network stands for.
MODELS = ("InteractionGNN", "InteractionGNN2")
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
    context = AcornContext(acorn, where, pt_unit, model, config=result.config, notes=result.notes)
    for key in acorn:
        if key in ELSEWHERE:
            context.note(f"{key}: not translated: {ELSEWHERE[key]}")
        else:
            handler = HANDLED[key]
            if handler is not None:
                handler(context, acorn[key])
    model_defaults(context)
    schedule(context)
    return result


def _model(context: AcornContext, value: Any) -> None:
    """Checked before the keys are read."""


#: Each acorn key this module reads, and how (``None``: read together with others after the
#: keys, by :func:`~partgnn.train.config.acorn_model_keys.model_defaults` or
#: :func:`~partgnn.train.config.acorn_training_keys.schedule`).
HANDLED: dict[str, Callable[..., None] | None] = {
    "model": _model,
    "model_name": _model,
    **MODEL_KEYS,
    **TRAINING_KEYS,
}
