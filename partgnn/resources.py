"""Files that ship inside the package: run-config templates, the detector geometry and trained
models.

The run configs live at the top of the repository (``configs/``) and the wheel carries them as
the package ``partgnn.configs``, so an installed partgnn never reads the source tree. A run
config is named either by a path or by the name of a shipped template (``--config demo`` is
``configs/demo.yaml``); ``partgnn configs`` lists the templates.
A trained model is named ``pretrained:NAME`` wherever a checkpoint is read
(``partgnn/pretrained/NAME.pt``, with its model card ``NAME.yaml``); ``partgnn pretrained``
lists them.
The real TrackML sample event is never assumed to exist: ``$PARTGNN_TRACKML_SAMPLE`` names its
folder when one is at hand.

This module imports only the standard library (the CLI resolves names before importing torch).
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from partgnn.errors import InputError

#: Environment variable naming the folder of the real TrackML sample event (optional).
SAMPLE_DIR_ENV = "PARTGNN_TRACKML_SAMPLE"

_CONFIG_SUFFIX = ".yaml"
#: How a checkpoint argument names a model shipped with the package.
PRETRAINED_PREFIX = "pretrained:"


def configs_dir() -> Path:
    """The folder of the shipped run-config templates: ``partgnn/configs`` of an installed
    wheel, else the checkout's top-level ``configs/`` (an editable install, ``PYTHONPATH``)."""
    installed = Path(str(resources.files("partgnn") / "configs"))
    if installed.is_dir():
        return installed
    return Path(__file__).resolve().parents[1] / "configs"


def config_names() -> list[str]:
    """Names of the shipped run-config templates, e.g. ``["ddp", "demo", "full", ...]``."""
    return sorted(path.stem for path in configs_dir().glob(f"*{_CONFIG_SUFFIX}"))


def resolve_config(spec: str | os.PathLike[str]) -> Path:
    """The config file ``spec`` names: an existing path, else a shipped template's name.

    Args:
        spec: A path (``runs/my.yaml``) or a template name (``demo`` or ``demo.yaml``).

    Raises:
        InputError: A folder, or neither a file nor a template; the message lists the
            templates.
    """
    path = Path(spec)
    if path.is_file():
        return path
    if path.is_dir():
        raise InputError(f"{spec}: is a folder; give the path of a config file (.yaml)")
    name = path.name.removesuffix(_CONFIG_SUFFIX)
    if path.parent == Path(".") and name in config_names():
        return configs_dir() / f"{name}{_CONFIG_SUFFIX}"
    raise InputError(
        f"{spec}: config file not found (and not a shipped config: {', '.join(config_names())})"
    )


def detector_geometry_path() -> Path:
    """The shipped TrackML detector geometry (``configs/detector/trackml.yaml``)."""
    return configs_dir() / "detector" / "trackml.yaml"


def trackml_sample_dir(default: str | os.PathLike[str] | None = None) -> Path | None:
    """The real TrackML sample event's folder: ``$PARTGNN_TRACKML_SAMPLE``, else ``default``.

    Returns ``None`` when neither names a folder holding ``event000000001-hits.csv(.gz)``.
    """
    for candidate in (os.environ.get(SAMPLE_DIR_ENV), default):
        if candidate and any(Path(candidate).glob("event*-hits.csv*")):
            return Path(candidate)
    return None


def pretrained_dir() -> Path:
    """The folder of the trained models shipped with the package."""
    return Path(str(resources.files("partgnn") / "pretrained"))


def pretrained_names() -> list[str]:
    """Names of the shipped trained models (a checkpoint with a model card each)."""
    folder = pretrained_dir()
    return sorted(p.stem for p in folder.glob("*.pt") if p.with_suffix(_CONFIG_SUFFIX).is_file())


def pretrained_name(spec: str | os.PathLike[str]) -> str | None:
    """The NAME of ``pretrained:NAME`` (a shipped model), or ``None`` when ``spec`` is a path.

    Raises:
        InputError: ``pretrained:NAME`` names no shipped model; the message lists them.
    """
    text = os.fspath(spec)
    if not text.startswith(PRETRAINED_PREFIX):
        return None
    name = text.removeprefix(PRETRAINED_PREFIX)
    names = pretrained_names()
    if name not in names:
        raise InputError(
            f"{text}: no such pretrained model (shipped: "
            f"{', '.join(PRETRAINED_PREFIX + n for n in names) or 'none'})"
        )
    return name


def resolve_checkpoint(spec: str | os.PathLike[str]) -> Path:
    """The checkpoint file ``spec`` names: ``pretrained:NAME`` is a shipped model
    (:func:`pretrained_name`), anything else a path (returned as it is)."""
    name = pretrained_name(spec)
    return Path(spec) if name is None else pretrained_dir() / f"{name}.pt"


def pretrained_card(name: str) -> Path:
    """The model card of a shipped model, named ``NAME`` or ``pretrained:NAME``
    (:func:`pretrained_name`'s error otherwise)."""
    spec = name if name.startswith(PRETRAINED_PREFIX) else PRETRAINED_PREFIX + name
    return pretrained_dir() / f"{pretrained_name(spec)}{_CONFIG_SUFFIX}"
