"""acorn's input, loss, optimizer and run keys translated
(:mod:`partgnn.train.config.acorn_config`): node and edge features with their scales, the
weighting, the learning rate and its schedule, the data split, the folder and the device, each
key's handler in :data:`TRAINING_KEYS`; :func:`schedule` reads the ones that go together."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from partgnn.data.graphs.graph_features import MIN_DR
from partgnn.train.config.acorn_keys import AcornContext, name_list, number, whole_number

#: acorn's edge features -> partgnn's columns.
EDGE_NAMES = {"dr": "dr", "dphi": "dphi", "dz": "dz", "deta": "deta", "phislope": "phi_slope",
              "rphislope": "rphi_slope"}  # fmt: skip


# --- the inputs ---


def _node_features(context: AcornContext, value: Any) -> None:
    names = name_list(context, "node_features", value)
    scales = context.acorn.get("node_scales")
    if scales is None:
        scales = [1.0] * len(names)
    if not isinstance(scales, list) or len(scales) != len(names):
        raise context.fail(
            "node_scales", f"one scale for each of the {len(names)} node_features (got {scales!r})"
        )
    columns = []
    for name, scale in zip(names, scales, strict=True):
        scale = number(context, f"node_scales ({name})", scale, positive=False)
        if scale == 0:
            raise context.fail("node_scales", f"the scale of {name} is 0")
        columns.append({name: scale})
    context.config["data"]["node_features"] = columns


def _node_scales(context: AcornContext, value: Any) -> None:
    if "node_features" not in context.acorn:
        raise context.fail("node_scales", "given without node_features")


def _edge_features(context: AcornContext, value: Any) -> None:
    if value is None or value == "None":
        return
    names = name_list(context, "edge_features", value)
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


# --- the loss ---


def _weighting(context: AcornContext, value: Any) -> None:
    """acorn's rules, in order, each setting the weight of the edges its conditions select (true
    edges 0 and fake ones 1 before any): partgnn's fake, target and non-target weights."""
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise context.fail("weighting", "must be a list of {weight, conditions} mappings")
    weights = {"fake": 1.0, "target": 0.0, "other": 0.0}
    target_pt = None
    for index, rule in enumerate(value):
        where = f"weighting[{index}]"
        weight = number(context, f"{where}.weight", rule.get("weight"), positive=False)
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


def _pt_floor(context: AcornContext, key: str, condition: Any) -> float:
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


def _lr(context: AcornContext, value: Any) -> None:
    context.config["optim"]["lr"] = number(context, "lr", value)


def _epochs(context: AcornContext, value: Any) -> None:
    context.config["optim"]["epochs"] = whole_number(context, "max_epochs", value)


def _weight_decay(context: AcornContext, value: Any) -> None:
    context.config["optim"]["weight_decay"] = number(
        context, "lr_weight_decay", value, positive=False
    )


def _scheduler(context: AcornContext, value: Any) -> None:
    if value not in (None, "StepLR"):
        context.note(f"scheduler {value}: not honoured: partgnn has StepLR's steps "
                     "(optim.schedule step), a cosine or a constant rate")  # fmt: skip


def schedule(context: AcornContext) -> None:
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
        warmup = whole_number(context, "warmup", warmup) if warmup else 0
    if acorn.get("scheduler") not in (None, "StepLR"):
        optim["schedule"] = "constant"
    elif "patience" in acorn or "factor" in acorn:
        optim["schedule"] = "step"
        optim["decay_factor"] = number(context, "factor", acorn.get("factor", 0.1))
        patience = whole_number(context, "patience", acorn.get("patience", 1))
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


def _data_split(context: AcornContext, value: Any) -> None:
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


def _stage_dir(context: AcornContext, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise context.fail("stage_dir", f"a folder (got {value!r})")
    context.config["run"]["dir"] = value


def _accelerator(context: AcornContext, value: Any) -> None:
    devices = {"gpu": "cuda", "cuda": "cuda", "cpu": "cpu", "auto": "auto"}
    if value not in devices:
        raise context.fail("accelerator", f"{value!r}: gpu, cpu or auto")
    context.config["run"]["device"] = devices[value]


def _weight(context: AcornContext, value: Any) -> None:
    """The older schema's weight of true edges (BCE's pos_weight), where no weighting says."""
    if "weighting" not in context.acorn:
        context.config["loss"]["pos_weight"] = number(context, "weight", value)


#: Each input, loss, optimizer and run key's handler (``None``: read together with others after
#: the keys, by :func:`schedule`).
TRAINING_KEYS: dict[str, Callable[[AcornContext, Any], None] | None] = {
    "weight": _weight,
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
