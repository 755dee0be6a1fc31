"""Training configuration: its typed sections, and how a mapping becomes one.

A config file has the sections of :class:`TrainConfig` (``mode``, ``data``, ``model``, ``loss``,
``optim``, ``run``); anything left out takes the defaults below. Reading a file, ``--set``
overrides and the checks of ranges and modes are :mod:`partgnn.train.config.config_file`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import sys
import types
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from partgnn.distributed.exchange_plan import Transport
from partgnn.errors import InputError
from partgnn.models.config import RENAMED_SETTINGS, ModelConfig, renamed_settings
from partgnn.train.loss import EdgeWeights

if TYPE_CHECKING:
    from partgnn.data.graphs.input_features import InputFeatures


@dataclass
class DataConfig:
    """Where the events come from.

    Attributes:
        graphs: Graphs file (``full`` and ``ddp`` modes read whole events from it).
        shards: Shard directory from ``partgnn partition`` (``halo`` and ``naive`` modes).
        val_events: How many events, taken from the end of the file, are for validation.
        boundary_shards: Shard directory whose cut marks the "boundary" edges in the metrics
            of ``full`` and ``ddp`` runs (``halo`` and ``naive`` use their own shards).
        standardise: Standardise every node and edge feature with the mean and spread fitted
            on the training events (kept in the model, so checkpoints carry them).
        cache_mb: Memory budget [MiB] for decoded events kept on the device across epochs;
            events beyond it are read again, one step ahead. 0 keeps none.
        node_features: The model's node input columns (:mod:`partgnn.data.graphs.input_features`):
            names (``[r, phi, z, eta, cluster_r_1]``), or names with scales (``{r: 1000,
            cluster_r_1: 1000}``); ``null``: partgnn's own, ``r/1000, phi/pi, z/1000, eta``.
        edge_features: The model's edge input columns, likewise (``null``: partgnn's seven).
    """

    graphs: str | None = None
    shards: str | None = None
    val_events: int = 1
    boundary_shards: str | None = None
    standardise: bool = True
    cache_mb: float = 1024.0
    node_features: list[Any] | dict[str, Any] | None = None
    edge_features: list[Any] | dict[str, Any] | None = None


@dataclass
class LossConfig:
    """Weighted binary cross-entropy (:mod:`partgnn.train.loss`).

    Attributes:
        pos_weight: Weight of a true edge (of a target particle, with ``target_pt``); false
            edges weigh 1.
        target_pt: ``null``: every true edge is a target. Else only the true edges of
            particles with ``pT > target_pt`` [GeV] are targets (the edges' ``edge_pt``), as
            the field trains on full event graphs: the others weigh ``nontarget_weight``.
        nontarget_weight: Weight of a true edge of a non-target particle (0: left out of the
            loss; it is still a positive, not a fake, where it counts).
    """

    pos_weight: float = 3.0
    target_pt: float | None = None
    nontarget_weight: float = 0.0

    def edge_weights(self) -> EdgeWeights:
        """The weights of the kinds of edges these settings give."""
        return EdgeWeights(self.pos_weight, self.target_pt, self.nontarget_weight)


@dataclass
class OptimConfig:
    """AdamW with linear warm-up, then a constant, cosine or stepped learning rate.

    Attributes:
        epochs: Passes over the training events.
        max_steps: Stop after this many optimizer steps (``None``: run all epochs).
        lr: Peak learning rate.
        weight_decay: AdamW weight decay.
        warmup_steps: Steps of linear warm-up from 0 to ``lr``.
        schedule: ``constant``, ``cosine`` (to 0 at the last step) after warm-up, or ``step``:
            the rate times ``decay_factor`` every ``decay_steps`` steps counted from the first
            (warm-up included), as acorn's default ``StepLR`` does per epoch.
        decay_steps: With ``step``: the steps between decays.
        decay_factor: With ``step``: what each decay multiplies the rate by, in (0, 1].
        grad_clip: Clip the global gradient norm to this value (``None``: no clipping).
        lr_scaling: How the learning rate grows with the events per step ``G`` (graph groups
            in halo mode, ranks in ddp mode): ``none``, ``linear`` (``lr x G``) or ``sqrt``
            (``lr x sqrt(G)``).
    """

    epochs: int = 10
    max_steps: int | None = None
    lr: float = 1e-3
    weight_decay: float = 1e-4
    warmup_steps: int = 10
    schedule: Literal["constant", "cosine", "step"] = "cosine"
    decay_steps: int | None = None
    decay_factor: float = 0.9
    grad_clip: float | None = 1.0
    lr_scaling: Literal["none", "linear", "sqrt"] = "none"


@dataclass
class RunConfig:
    """Where results go and how the run executes.

    Attributes:
        dir: Run directory (config snapshot, metrics.csv, TensorBoard logs, checkpoints).
        seed: Seed of weights and event order.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        backend: ``torch.distributed`` backend: ``auto`` (NCCL on GPUs, one per rank; gloo on
            CPUs, and where torchrun starts more ranks per node than it has GPUs), ``nccl`` or
            ``gloo`` (on GPUs: ranks may share one, and halo rows go through host memory).
        dtype: Parameter and activation dtype.
        bf16: bf16 autocast for the forward pass: true, false, or ``auto`` (where the device
            computes bf16 natively: :mod:`partgnn.train.precision`).
        transport: Halo-exchange transport (``auto``, ``all_to_all``, ``p2p``).
        hide_communication: Hide communication behind compute: each halo exchange runs in the
            background while the interior edges (both endpoints owned) are computed, forward
            and backward, and gradients are all-reduced bucket by bucket during the backward
            pass. ``False``: every exchange blocks and gradients are reduced after the backward
            pass (the same results up to float rounding). Its old name ``run.overlap`` is read as
            it, with a notice.
        sampling: Which events each step trains on (:mod:`partgnn.train.items.sampling`):
            ``random`` or ``size_buckets`` (each step's events of similar graph size, so graph
            groups wait less for each other).
        size_buckets: With ``size_buckets``: how many buckets of graph size.
        timeout_s: Timeout of collectives [s].
        checkpoint_every: Save a checkpoint every this many optimizer steps (and at the end).
        keep_checkpoints: How many step checkpoints (``step-NNNNNNN.pt``) to keep, the newest;
            older ones are removed as new ones are written. ``last.pt`` is kept besides.
        eval_every: Evaluate on the validation events every this many epochs.
        cut_beta: The score cut stored with the model maximises the edge F-beta score on the
            validation events; ``beta < 1`` weighs purity more (a false edge merges two tracks
            in connected components, a missing one only splits one).
        progress: Show a progress bar on rank 0.
        tensorboard: Write TensorBoard logs.
        loggers: Experiment trackers beside TensorBoard, given the same metrics
            (:mod:`partgnn.train.run_directory.experiment_loggers`): ``wandb`` (offline unless
            ``WANDB_MODE`` says otherwise) and ``mlflow`` (a file store in the run directory unless
            ``MLFLOW_TRACKING_URI`` says otherwise), each an optional extra.
        init_from: Start from this checkpoint's weights (a path or ``pretrained:NAME``) instead
            of random ones: fine-tuning. Its model settings must be the config's; the optimizer,
            the learning-rate schedule and the step count start afresh, and the input
            standardisation is the checkpoint's (its weights were learned for those scalings),
            not fitted again. A resumed run continues from its own checkpoint.
        deterministic: Only deterministic kernels (``torch.use_deterministic_algorithms``;
            on GPUs e.g. ``index_add_`` without atomics, and cuBLAS with a fixed workspace):
            two runs give the same bits, at some cost in speed on GPUs. On CPUs the kernels
            partgnn uses are deterministic already.
        keep_freed_heap: The ``partgnn train`` process keeps freed CPU memory for reuse instead
            of returning it to the system (glibc; :mod:`partgnn.memory.heap_retention`): steps
            whose event-sized temporaries would be faulted in afresh each time run faster, and
            the resident memory stays at the step's peak between steps.
        cuda_graphs: Replay each rank's step as a CUDA graph per padded shape of its graph
            (:mod:`partgnn.train.captured_step`; exact: the padding contributes nothing):
            ``auto`` on a GPU where nothing prevents it (graph groups of one rank), ``on`` also
            graph groups exchanging over NCCL, ``off`` never. Where a step cannot be captured
            it runs as before, and the run says why in one line.
    """

    dir: str = "runs/run"
    seed: int = 0
    device: str = "auto"
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    dtype: Literal["float32", "float64"] = "float32"
    bf16: bool | Literal["auto"] = False
    transport: Transport = "auto"
    hide_communication: bool = True
    sampling: Literal["random", "size_buckets"] = "random"
    size_buckets: int = 4
    timeout_s: float = 300.0
    checkpoint_every: int = 50
    keep_checkpoints: int = 3
    eval_every: int = 1
    cut_beta: float = 0.5
    progress: bool = True
    tensorboard: bool = True
    loggers: list[str] = field(default_factory=list)
    init_from: str | None = None
    deterministic: bool = False
    keep_freed_heap: bool = False
    cuda_graphs: Literal["auto", "on", "off"] = "auto"


#: Settings renamed, per section: old name -> new name (an old config is read as new, said in
#: one line).
RENAMED: dict[type, tuple[str, dict[str, str]]] = {
    ModelConfig: ("model", RENAMED_SETTINGS),
    RunConfig: ("run", {"overlap": "hide_communication"}),
}


@dataclass
class TrainConfig:
    """A whole training run.

    Attributes:
        mode: ``full`` (one process, whole graphs), ``halo`` (each event over P ranks with halo
            exchange: exact), ``naive`` (each rank its own sector, no exchange),
            ``overlapping`` (each rank its sector extended by the shards' margin of hops, no
            exchange) or ``ddp`` (whole events spread over ranks): the modes of
            :mod:`partgnn.train.strategies`, checked by
            :func:`~partgnn.train.config.config_file.validate_config`.
    """

    mode: str = "full"
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def build_config(raw: dict[str, Any], where: str) -> TrainConfig:
    """A config of the sections in ``raw`` (defaults for what it leaves out), each field of
    its type (ranges and modes are :func:`~partgnn.train.config.config_file.validate_config`'s).

    Raises:
        InputError: One line naming ``where`` and the bad field.
    """
    return _build(TrainConfig, raw, where, "")


def _build(cls: type, raw: Any, where: str, prefix: str) -> Any:
    if raw is None:  # an empty section takes its defaults
        raw = {}
    if not isinstance(raw, dict):
        raise InputError(f"{where}: {prefix.rstrip('.') or 'config'} must be a mapping")
    if cls in RENAMED:
        raw = _current_names(raw, where, cls)
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise InputError(
            f"{where}: unknown field {prefix}{unknown[0]} (known: {', '.join(sorted(known))})"
        )
    values = {}
    for name, value in raw.items():
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            values[name] = _build(hint, value, where, f"{prefix}{name}.")
        else:
            values[name] = _coerce(value, hint, where, f"{prefix}{name}")
    return cls(**values)


def _current_names(raw: dict[str, Any], where: str, cls: type) -> dict[str, Any]:
    """A section with renamed settings under their new names, each said in one warning line
    (:data:`RENAMED`).

    Raises:
        InputError: A setting given under both names.
    """
    section, renamed = RENAMED[cls]
    try:
        current, old_names = renamed_settings(raw, renamed, section)
    except ValueError as err:
        raise InputError(f"{where}: {err}") from None
    for old in old_names:
        print(
            f"partgnn: warning: {where}: {section}.{old} is renamed {section}.{renamed[old]} "
            "(read as it; rename it in the config)",
            file=sys.stderr,
        )
    return current


def _coerce(value: Any, hint: Any, where: str, name: str) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        if value not in args:
            choices = ", ".join(map(str, args))
            raise InputError(f"{where}: {name} must be one of {choices} (got {value!r})")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _coerce(value, inner[0], where, name)
        for hint_of_one in inner:  # e.g. bool | Literal["auto"]: the first that takes it
            with contextlib.suppress(InputError):
                return _coerce(value, hint_of_one, where, name)
        choices = " or ".join(_choice_words(a) for a in inner)
        raise InputError(f"{where}: {name} must be {choices} (got {value!r})")
    if hint is bool:
        if not isinstance(value, bool):
            raise InputError(f"{where}: {name} must be true or false (got {value!r})")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"{where}: {name} must be an integer (got {value!r})")
        return value
    if hint is float:
        # YAML reads "1e-3" (no dot) as a string; accept what Python reads as a number.
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = float(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(f"{where}: {name} must be a number (got {value!r})")
        if not math.isfinite(value):
            raise InputError(f"{where}: {name} must be finite (got {value!r})")
        return float(value)
    if origin is list:
        if not isinstance(value, list):
            raise InputError(f"{where}: {name} must be a list (got {value!r})")
        return list(value)
    if origin is dict:
        if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
            raise InputError(
                f"{where}: {name} must be a mapping of names to values (got {value!r})"
            )
        return dict(value)
    if hint is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise InputError(f"{where}: {name} must be a string (got {value!r})")
        return str(value)
    raise TypeError(f"unsupported config type {hint!r} for {name}")


def _choice_words(hint: Any) -> str:
    """``true or false`` for bool, ``auto`` for Literal["auto"]..."""
    if hint is bool:
        return "true or false"
    if typing.get_origin(hint) is Literal:
        return " or ".join(map(str, typing.get_args(hint)))
    return getattr(hint, "__name__", str(hint))


def input_features(config: TrainConfig, where: str = "config") -> InputFeatures:
    """The model's input columns ``config`` names (:mod:`partgnn.data.graphs.input_features`).

    Raises:
        InputError: A malformed list, a truth field, a bad scale (one line naming ``where``).
    """
    from partgnn.data.graphs.input_features import InputFeatures

    return InputFeatures.parse(config.data.node_features, config.data.edge_features, where=where)
