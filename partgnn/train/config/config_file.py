"""A training config from a YAML file and ``--set`` overrides, checked.

Every field is checked at start and a bad one is named in a one-line error (``halo.yaml: optim.lr
must be > 0 (got -1.0)``), before any process group or file is touched; a mode's needs are its
facts' (:mod:`partgnn.train.modes`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

import yaml

from partgnn.errors import InputError
from partgnn.resources import resolve_config
from partgnn.train.config.sections import TrainConfig, build_config, input_features
from partgnn.train.strategies import mode_facts
from partgnn.yaml_files import load_yaml, read_yaml_file


def load_config(path: str | os.PathLike[str] | None, overrides: Sequence[str] = ()) -> TrainConfig:
    """Reads a YAML config, applies ``key.sub=value`` overrides, and validates the result.

    Args:
        path: YAML file, or the name of a shipped template (``demo``: see
            :func:`partgnn.resources.config_names`); ``None``: defaults only.
        overrides: ``section.field=value`` strings; values are parsed as YAML scalars.

    Raises:
        InputError: One line naming the file and the bad field.
    """
    where = str(path) if path is not None else "config"
    raw: dict[str, Any] = {}
    if path is not None:
        config_path = resolve_config(path)
        if not config_path.exists():
            raise InputError(f"{where}: config file not found")
        raw = read_yaml_file(config_path, where=where) or {}
        if not isinstance(raw, dict):
            raise InputError(f"{where}: expected a mapping of sections")
    for override in overrides:
        key, sep, text = override.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InputError(f"--set {override!r}: expected key=value, e.g. optim.lr=0.001")
        try:
            value = load_yaml(text, where=f"--set {key}")
        except yaml.YAMLError:
            value = text
        target = raw
        *parents, leaf = key.split(".")
        for parent in parents:
            if target.get(parent) is None:  # a section with every key commented out
                target[parent] = {}
            target = target[parent]
            if not isinstance(target, dict):
                raise InputError(f"--set {override!r}: {parent} is not a section")
        target[leaf] = value
    try:
        config = build_config(raw, where)
        validate_config(config, where)
    except InputError as err:
        raise _attributed(err, where, overrides) from None
    return config


def _attributed(err: InputError, where: str, overrides: Sequence[str]) -> InputError:
    """``err`` said of the ``--set KEY=VALUE`` that gave the field it names, not of the config
    file (the last such override wins, as it does in the config)."""
    message = str(err)
    if not message.startswith(f"{where}: "):
        return err
    said = message[len(where) + 2 :]
    for override in reversed(overrides):
        key = override.partition("=")[0].strip()
        if re.search(rf"(^|\s){re.escape(key)}(\s|:|$)", said):
            return InputError(f"--set {override}: {said}")
    return err


def validate_config(config: TrainConfig, where: str = "config") -> None:
    """Checks ranges, the mode and the fields it needs.

    Raises:
        InputError: One line naming the field.
    """

    def require(condition: bool, name: str, message: str) -> None:
        if not condition:
            raise InputError(f"{where}: {name} {message} (got {_lookup(config, name)!r})")

    facts = mode_facts(config.mode, where)
    input_features(config, where)  # (a malformed list: one line, here)
    data = "data.shards" if facts.reads_shards else "data.graphs"
    require(bool(_lookup(config, data)), data, f"is needed in mode {config.mode}")
    require(config.data.val_events >= 0, "data.val_events", "must be >= 0")
    require(config.data.cache_mb >= 0, "data.cache_mb", "must be >= 0")
    require(
        config.model.target is None or ":" in config.model.target,
        "model.target",
        "must be package.module:Class",
    )
    for name in ("model.hidden", "model.steps", "model.mlp_layers", "optim.epochs"):
        require(_lookup(config, name) >= 1, name, "must be >= 1")
    require(
        config.model.chunk_mb is None or config.model.chunk_mb > 0,
        "model.chunk_mb",
        "must be > 0 or null",
    )
    require(
        not (config.model.batch_norm and config.model.layer_norm),
        "model.batch_norm",
        "needs model.layer_norm: false (one norm per MLP layer)",
    )
    from partgnn.train.run_directory.experiment_loggers import check_loggers

    check_loggers(list(config.run.loggers), where)
    require(config.optim.lr > 0, "optim.lr", "must be > 0")
    require(config.optim.weight_decay >= 0, "optim.weight_decay", "must be >= 0")
    require(config.optim.warmup_steps >= 0, "optim.warmup_steps", "must be >= 0")
    require(
        config.optim.schedule != "step"
        or (config.optim.decay_steps is not None and config.optim.decay_steps >= 1),
        "optim.decay_steps",
        "must be >= 1 with optim.schedule step",
    )
    require(0 < config.optim.decay_factor <= 1, "optim.decay_factor", "must be in (0, 1]")
    require(
        config.optim.max_steps is None or config.optim.max_steps >= 1,
        "optim.max_steps",
        "must be >= 1 or null",
    )
    require(
        config.optim.grad_clip is None or config.optim.grad_clip > 0,
        "optim.grad_clip",
        "must be > 0 or null",
    )
    require(config.loss.pos_weight > 0, "loss.pos_weight", "must be > 0")
    require(
        config.loss.target_pt is None or config.loss.target_pt >= 0,
        "loss.target_pt",
        "must be >= 0 or null",
    )
    require(config.loss.nontarget_weight >= 0, "loss.nontarget_weight", "must be >= 0")
    require(config.run.checkpoint_every >= 1, "run.checkpoint_every", "must be >= 1")
    require(config.run.keep_checkpoints >= 1, "run.keep_checkpoints", "must be >= 1")
    require(config.run.eval_every >= 1, "run.eval_every", "must be >= 1")
    require(config.run.size_buckets >= 1, "run.size_buckets", "must be >= 1")
    require(config.run.cut_beta > 0, "run.cut_beta", "must be > 0")
    require(config.run.timeout_s >= 1, "run.timeout_s", "must be >= 1 [s]")


def _lookup(config: TrainConfig, name: str) -> Any:
    value: Any = config
    for part in name.split("."):
        value = getattr(value, part)
    return value
