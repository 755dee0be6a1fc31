"""Training configs: defaults, YAML files, ``--set`` overrides, one-line errors, shipped configs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml

from partgnn.errors import InputError
from partgnn.resources import configs_dir
from partgnn.train.config.config_file import load_config, validate_config
from partgnn.train.config.sections import DataConfig, ModelConfig, OptimConfig, TrainConfig
from partgnn.train.strategies import STRATEGIES

CONFIG_DIR = configs_dir()
SHIPPED = sorted(CONFIG_DIR.glob("*.yaml"))
GRAPHS = "data: {graphs: g.h5}\n"


def write(folder: Path, text: str, name: str = "run.yaml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def error_of(path: Path | None, overrides: Sequence[str] = ()) -> str:
    """The message of the InputError that loading raises; it must be a single line."""
    with pytest.raises(InputError) as info:
        load_config(path, overrides)
    message = str(info.value)
    assert "\n" not in message, message
    return message


# ---------------------------------------------------------------------------------------------
# Defaults and YAML files


def test_defaults():
    config = TrainConfig()
    assert config.mode == "full"
    assert config.data == DataConfig(graphs=None, shards=None, val_events=1, boundary_shards=None)
    assert (config.model.hidden, config.model.steps, config.model.mlp_layers) == (64, 6, 2)
    assert (config.model.activation, config.model.aggregation) == ("relu", "sum")
    assert not config.model.recompute and not config.model.shared_weights
    assert config.model.residual and config.model.layer_norm
    assert config.loss.pos_weight == 3.0
    assert config.optim == OptimConfig(
        epochs=10,
        max_steps=None,
        lr=1e-3,
        weight_decay=1e-4,
        warmup_steps=10,
        schedule="cosine",
        grad_clip=1.0,
    )
    assert (config.run.dir, config.run.seed, config.run.device) == ("runs/run", 0, "auto")
    assert (config.run.dtype, config.run.bf16, config.run.transport) == ("float32", False, "auto")
    # Sections are independent objects, not one shared default.
    assert TrainConfig().model is not config.model


def test_no_file_takes_defaults_plus_overrides():
    assert load_config(None, ["data.graphs=g.h5"]) == TrainConfig(data=DataConfig(graphs="g.h5"))
    assert error_of(None) == "config: data.graphs is needed in mode full (got None)"


def test_yaml_sets_given_fields_and_leaves_the_rest_default(tmp_path: Path, capsys):
    path = write(
        tmp_path,
        "mode: halo\n"
        "data:\n  shards: data/shards-metis2\n  val_events: 3\n"
        "model:\n  hidden: 16\n  activation: silu\n  checkpoint: true\n"
        "optim:\n  lr: 0.01\n  max_steps: 7\n  grad_clip: null\n"
        f"run:\n  dir: {tmp_path / 'runs' / 'a'}\n",
    )
    config = load_config(path)
    assert config.mode == "halo"
    assert config.data == DataConfig(shards="data/shards-metis2", val_events=3)
    # model.checkpoint is the old name of model.recompute: read as it, said in one line
    assert config.model == ModelConfig(hidden=16, activation="silu", recompute=True)
    assert "model.checkpoint is renamed model.recompute" in capsys.readouterr().err
    assert config.optim == OptimConfig(lr=0.01, max_steps=7, grad_clip=None)
    assert config.loss == TrainConfig().loss
    assert config.run.dir == str(tmp_path / "runs" / "a") and config.run.seed == 0
    # Loading checks; it creates nothing.
    assert not (tmp_path / "runs").exists()


def test_run_overlap_is_the_old_name_of_run_hide_communication(tmp_path: Path, capsys):
    path = write(tmp_path, GRAPHS + "run: {overlap: false}\n")
    assert load_config(path).run.hide_communication is False
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "run.overlap is renamed run.hide_communication" in err[0], err
    both = write(tmp_path, GRAPHS + "run: {overlap: false, hide_communication: true}\n")
    with pytest.raises(
        InputError, match=r"run\.overlap and run\.hide_communication are one setting"
    ):
        load_config(both)


def test_yaml_numbers_are_coerced_to_the_field_type(tmp_path: Path):
    # PyYAML reads 1e-3 (no dot) as a string, and 5 as an int: both are fine for a float field.
    path = write(tmp_path, GRAPHS + "optim: {lr: 1e-3}\nloss: {pos_weight: 5}\n")
    config = load_config(path)
    assert config.optim.lr == 0.001 and type(config.optim.lr) is float
    assert config.loss.pos_weight == 5.0 and type(config.loss.pos_weight) is float


# ---------------------------------------------------------------------------------------------
# --set overrides


@pytest.mark.parametrize(
    ("override", "field", "expected"),
    [
        ("optim.lr=1e-3", "optim.lr", 0.001),
        ("optim.lr=0.25", "optim.lr", 0.25),
        ("optim.max_steps=null", "optim.max_steps", None),
        ("optim.max_steps=12", "optim.max_steps", 12),
        ("optim.grad_clip=null", "optim.grad_clip", None),
        ("model.recompute=true", "model.recompute", True),
        ("model.checkpoint=true", "model.recompute", True),  # its old name
        ("model.hidden=128", "model.hidden", 128),
        ("model.aggregation=sum_max", "model.aggregation", "sum_max"),
        ("run.device=cuda:1", "run.device", "cuda:1"),
        ("run.dir=runs/a=b", "run.dir", "runs/a=b"),
        ("data.boundary_shards=data/shards-phi2", "data.boundary_shards", "data/shards-phi2"),
        ("mode=ddp", "mode", "ddp"),
    ],
)
def test_set_overrides_parse_yaml_scalars(tmp_path: Path, override, field, expected):
    path = write(tmp_path, GRAPHS + "optim: {max_steps: 100, lr: 0.5}\n")
    config = load_config(path, [override])
    value = config
    for part in field.split("."):
        value = getattr(value, part)
    assert value == expected and type(value) is type(expected)


def test_set_creates_sections_missing_from_the_file_and_later_wins(tmp_path: Path):
    path = write(tmp_path, GRAPHS)
    config = load_config(path, ["model.hidden=16", "model.steps=2", "model.hidden=24"])
    assert (config.model.hidden, config.model.steps) == (24, 2)


def test_set_is_validated_with_the_file(tmp_path: Path):
    # The file alone is incomplete (halo needs shards); the override completes it.
    path = write(tmp_path, "mode: halo\n")
    assert load_config(path, ["data.shards=s"]).data.shards == "s"
    assert error_of(path) == f"{path}: data.shards is needed in mode halo (got None)"
    assert error_of(path, ["data.shards=s", "optim.lr=-1"]) == (
        "--set optim.lr=-1: optim.lr must be > 0 (got -1.0)"  # the --set, not the file
    )


@pytest.mark.parametrize("override", ["optim.lr", "=3", ""])
def test_set_without_key_and_equals_sign_is_refused(tmp_path: Path, override):
    path = write(tmp_path, GRAPHS)
    assert error_of(path, [override]) == (
        f"--set {override!r}: expected key=value, e.g. optim.lr=0.001"
    )


def test_set_errors_name_the_field(tmp_path: Path):
    path = write(tmp_path, "mode: halo\ndata: {shards: s}\n")
    assert error_of(path, ["mode.x=1"]) == "--set 'mode.x=1': mode is not a section"
    assert error_of(path, ["optim.learning_rate=1"]).startswith(
        "--set optim.learning_rate=1: unknown field optim.learning_rate (known: "
    )
    assert error_of(path, ["model.hidden=big"]) == (
        "--set model.hidden=big: model.hidden must be an integer (got 'big')"
    )
    assert error_of(path, ["optim.lr=[1"]) == (
        "--set optim.lr=[1: optim.lr must be a number (got '[1')"
    )
    assert error_of(path, ["model=3"]) == "--set model=3: model must be a mapping"
    # a field the file gave, beside a --set of another: still the file's
    assert error_of(write(tmp_path, "mode: halo\ndata: {shards: s}\noptim: {lr: -1}\n"),
                    ["model.hidden=8"]).endswith(": optim.lr must be > 0 (got -1.0)")  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Errors: one line naming the file and the field

BAD_FIELDS = [
    # unknown sections and fields
    (
        GRAPHS + "optimizer: {lr: 1}\n",
        "unknown field optimizer (known: data, loss, mode, model, optim, run)",
    ),
    (
        GRAPHS + "model: {hiden: 32}\n",
        "unknown field model.hiden (known: activation, aggregation, batch_norm, chunk_mb, "
        "concat_initial, fused, hidden, kwargs, layer_norm, mlp_layers, recompute, residual, "
        "shared_weights, skip_unconnected, steps, target)",
    ),
    (
        GRAPHS + "model: {batch_norm: true}\n",
        "model.batch_norm needs model.layer_norm: false (one norm per MLP layer) (got True)",
    ),
    (
        GRAPHS + "model: {kwargs: [1, 2]}\n",
        "model.kwargs must be a mapping of names to values (got [1, 2])",
    ),
    (
        GRAPHS + "model: {target: my_model}\n",
        "model.target must be package.module:Class (got 'my_model')",
    ),
    (GRAPHS + "model: 64\n", "model must be a mapping"),
    (GRAPHS + "model: [hidden, 64]\n", "model must be a mapping"),
    # wrong types
    (GRAPHS + 'model: {hidden: "64"}\n', "model.hidden must be an integer (got '64')"),
    (GRAPHS + "model: {steps: true}\n", "model.steps must be an integer (got True)"),
    (GRAPHS + "optim: {epochs: 2.5}\n", "optim.epochs must be an integer (got 2.5)"),
    (GRAPHS + "optim: {max_steps: false}\n", "optim.max_steps must be an integer (got False)"),
    (GRAPHS + "run: {seed: null}\n", "run.seed must be an integer (got None)"),
    (GRAPHS + "optim: {lr: fast}\n", "optim.lr must be a number (got 'fast')"),
    (GRAPHS + "optim: {lr: true}\n", "optim.lr must be a number (got True)"),
    (GRAPHS + "model: {recompute: 1}\n", "model.recompute must be true or false (got 1)"),
    (
        GRAPHS + "model: {recompute: true, checkpoint: true}\n",
        "model.checkpoint and model.recompute are one setting (renamed): give one",
    ),
    (GRAPHS + "run: {bf16: 'no way'}\n", "run.bf16 must be true or false or auto (got 'no way')"),
    (GRAPHS + "run: {dir: [a, b]}\n", "run.dir must be a string (got ['a', 'b'])"),
    ("data: {graphs: true}\n", "data.graphs must be a string (got True)"),
    # choices
    (
        "mode: pipeline\n" + GRAPHS,
        "mode must be one of full, ddp, halo, naive, overlapping (got 'pipeline')",
    ),
    (
        GRAPHS + "model: {activation: swish}\n",
        "model.activation must be one of relu, silu, gelu, tanh, leaky_relu (got 'swish')",
    ),
    (
        GRAPHS + "model: {aggregation: min}\n",
        "model.aggregation must be one of sum, mean, max, sum_max (got 'min')",
    ),
    (
        GRAPHS + "optim: {schedule: linear}\n",
        "optim.schedule must be one of constant, cosine, step (got 'linear')",
    ),
    (
        GRAPHS + "run: {dtype: float16}\n",
        "run.dtype must be one of float32, float64 (got 'float16')",
    ),
    (
        GRAPHS + "run: {transport: nccl}\n",
        "run.transport must be one of auto, all_to_all, p2p (got 'nccl')",
    ),
    # ranges
    ("data: {graphs: g.h5, val_events: -1}\n", "data.val_events must be >= 0 (got -1)"),
    (GRAPHS + "model: {hidden: 0}\n", "model.hidden must be >= 1 (got 0)"),
    (GRAPHS + "model: {steps: 0}\n", "model.steps must be >= 1 (got 0)"),
    (GRAPHS + "model: {mlp_layers: -2}\n", "model.mlp_layers must be >= 1 (got -2)"),
    (GRAPHS + "optim: {epochs: 0}\n", "optim.epochs must be >= 1 (got 0)"),
    (GRAPHS + "optim: {lr: 0}\n", "optim.lr must be > 0 (got 0.0)"),
    (GRAPHS + "optim: {lr: -1.0}\n", "optim.lr must be > 0 (got -1.0)"),
    (GRAPHS + "optim: {lr: .nan}\n", "optim.lr must be finite (got nan)"),
    (GRAPHS + "optim: {weight_decay: -0.1}\n", "optim.weight_decay must be >= 0 (got -0.1)"),
    (GRAPHS + "optim: {warmup_steps: -1}\n", "optim.warmup_steps must be >= 0 (got -1)"),
    (GRAPHS + "optim: {max_steps: 0}\n", "optim.max_steps must be >= 1 or null (got 0)"),
    (GRAPHS + "optim: {grad_clip: 0}\n", "optim.grad_clip must be > 0 or null (got 0.0)"),
    (GRAPHS + "model: {chunk_mb: 0}\n", "model.chunk_mb must be > 0 or null (got 0.0)"),
    (GRAPHS + "loss: {pos_weight: 0}\n", "loss.pos_weight must be > 0 (got 0.0)"),
    (GRAPHS + "loss: {target_pt: -1}\n", "loss.target_pt must be >= 0 or null (got -1.0)"),
    (
        GRAPHS + "loss: {nontarget_weight: -0.5}\n",
        "loss.nontarget_weight must be >= 0 (got -0.5)",
    ),
    (GRAPHS + "run: {checkpoint_every: 0}\n", "run.checkpoint_every must be >= 1 (got 0)"),
    (GRAPHS + "run: {eval_every: 0}\n", "run.eval_every must be >= 1 (got 0)"),
    (GRAPHS + "run: {timeout_s: 0}\n", "run.timeout_s must be >= 1 [s] (got 0.0)"),
    # the data each mode needs
    ("mode: full\ndata: {shards: s}\n", "data.graphs is needed in mode full (got None)"),
    ("mode: ddp\ndata: {shards: s}\n", "data.graphs is needed in mode ddp (got None)"),
    ("mode: halo\n" + GRAPHS, "data.shards is needed in mode halo (got None)"),
    ("mode: naive\n" + GRAPHS, "data.shards is needed in mode naive (got None)"),
]


@pytest.mark.parametrize(("text", "expected"), BAD_FIELDS)
def test_bad_field_is_one_line_naming_file_and_field(tmp_path: Path, text, expected):
    path = write(tmp_path, text, name="bad.yaml")
    assert error_of(path) == f"{path}: {expected}"


@pytest.mark.parametrize("text", ["- full\n- halo\n", "halo\n", "42\n"])
def test_file_that_is_not_a_mapping(tmp_path: Path, text):
    path = write(tmp_path, text)
    assert error_of(path) == f"{path}: expected a mapping of sections"


@pytest.mark.parametrize("text", ["model: [hidden\n", "mode: full\n  bad: indent\n", 'mode: "x\n'])
def test_invalid_yaml(tmp_path: Path, text):
    path = write(tmp_path, text)
    assert re.match(rf"{re.escape(str(path))}: not valid YAML at line \d+ \(.+\)$", error_of(path))


def test_missing_file(tmp_path: Path):
    path = tmp_path / "nowhere.yaml"
    assert error_of(path).startswith(f"{path}: config file not found (and not a shipped config: ")
    assert "demo, " in error_of(path)


def test_a_folder_as_config_says_it_is_a_folder(tmp_path: Path):
    assert error_of(tmp_path) == f"{tmp_path}: is a folder; give the path of a config file (.yaml)"


@pytest.mark.parametrize("name", ["demo", "demo.yaml", "halo"])
def test_a_shipped_config_is_found_by_name_from_any_folder(name, tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_config(name) == load_config(configs_dir() / f"{name.removesuffix('.yaml')}.yaml")


def test_a_file_in_the_working_folder_wins_over_a_shipped_name(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "demo").write_text(GRAPHS + "optim: {lr: 0.125}\n")
    assert load_config("demo").optim.lr == 0.125


def test_empty_file_is_all_defaults(tmp_path: Path):
    path = write(tmp_path, "# nothing yet\n")
    assert error_of(path) == f"{path}: data.graphs is needed in mode full (got None)"
    assert load_config(path, ["data.graphs=g.h5"]) == TrainConfig(data=DataConfig(graphs="g.h5"))


@pytest.mark.parametrize("mode", list(STRATEGIES))
def test_validate_config_on_a_config_built_in_python(mode):
    config = TrainConfig(mode=mode)
    needed = "shards" if STRATEGIES[mode].facts.reads_shards else "graphs"
    with pytest.raises(InputError, match=rf"^cli: data\.{needed} is needed in mode {mode} "):
        validate_config(config, "cli")
    setattr(config.data, needed, "x")
    validate_config(config, "cli")
    config.optim.grad_clip = -1.0
    with pytest.raises(InputError, match=r"^config: optim\.grad_clip must be > 0 or null"):
        validate_config(config)


# ---------------------------------------------------------------------------------------------
# Round trip through to_dict


def test_to_dict_round_trips_through_yaml(tmp_path: Path):
    config = load_config(
        None,
        [
            "mode=naive",
            "data.shards=data/shards-phi4",
            "data.boundary_shards=data/shards-metis4",
            "model.activation=gelu",
            "model.recompute=true",
            "optim.lr=3e-4",
            "optim.max_steps=9",
            "optim.grad_clip=null",
            "run.device=cuda:0",
            "run.dtype=float64",
        ],
    )
    as_dict = config.to_dict()
    assert set(as_dict) == {"mode", "data", "model", "loss", "optim", "run"}
    assert as_dict["optim"]["lr"] == 3e-4 and as_dict["optim"]["grad_clip"] is None
    path = write(tmp_path, yaml.safe_dump(as_dict, sort_keys=False), name="snapshot.yaml")
    assert load_config(path) == config


# ---------------------------------------------------------------------------------------------
# The shipped configs/*.yaml


def header_of(path: Path) -> str:
    """The comment block a config file starts with, without the ``#`` marks."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return "\n".join(lines)


def test_every_config_of_the_issue_is_shipped():
    names = {path.stem for path in SHIPPED}
    assert {"demo", "full", "halo", "naive", "ddp", "pileup200"} <= names


@pytest.mark.parametrize("path", SHIPPED, ids=lambda path: path.name)
def test_shipped_config_loads_and_its_data_fits_its_mode(path: Path):
    config = load_config(path)
    assert config.mode == path.stem or path.stem in ("demo", "pileup200", "recipe", "full-recipe")
    if config.mode in ("full", "ddp"):
        assert config.data.graphs
    else:
        assert config.data.shards
    assert config.run.dir

    header = header_of(path)
    assert header, f"{path.name} must start with a comment saying what it is for"
    assert f"--config {path.stem}" in header
    # The header's commands make every file the config reads.
    for name in ("graphs", "shards", "boundary_shards"):
        target = getattr(config.data, name)
        if target is not None:
            assert f"--out {target}" in header, f"{path.name}: no command writes data.{name}"
    # A graph-parallel launch uses as many ranks as the shards have parts.
    launch = re.search(r"--nproc-per-node (\d+)", header)
    if config.data.shards is not None and launch:
        partition = next(
            line for line in header.splitlines() if f"--out {config.data.shards}" in line
        )
        assert re.search(rf"--parts {launch.group(1)}\b", partition), partition


def test_shipped_configs_write_to_different_run_directories():
    dirs = [load_config(path).run.dir for path in SHIPPED]
    assert len(set(dirs)) == len(dirs), dirs


def test_demo_config_serves_every_demo_mode():
    path = CONFIG_DIR / "demo.yaml"
    for mode in ("full", "halo", "naive"):
        config = load_config(path, [f"mode={mode}"])
        for target in (config.data.graphs, config.data.shards, config.run.dir):
            assert target.startswith("demo-output/"), target
        assert config.run.device == "cpu"
