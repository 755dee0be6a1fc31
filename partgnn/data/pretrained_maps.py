"""The module maps that shipped models' graphs are built with.

A map of the full-graph model is tens of MB, so it does not ship: its model card records the
``fit-module-map`` arguments that made it (events simulated on the fly, so nothing else is
needed) and the file's SHA-256. ``partgnn pretrained pretrained:NAME --make-map`` fits it once
per machine into partgnn's cache folder (:func:`cache_dir`) and checks the checksum;
``build-graphs --map pretrained:NAME`` then builds graphs the way the model expects.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from partgnn.errors import InputError
from partgnn.resources import PRETRAINED_PREFIX, pretrained_card

#: Environment variable naming partgnn's cache folder.
CACHE_DIR_ENV = "PARTGNN_CACHE"


def cache_dir() -> Path:
    """``$PARTGNN_CACHE``, else ``$XDG_CACHE_HOME/partgnn``, else ``~/.cache/partgnn``."""
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "partgnn"


def card_construction(name: str) -> dict[str, Any]:
    """The ``construction`` section of a shipped model's card (``{}`` if it has none)."""
    import yaml

    card = yaml.safe_load(pretrained_card(name).read_text()) or {}
    return dict(card.get("construction") or {})


def _model_name(spec: str) -> str:
    return spec.removeprefix(PRETRAINED_PREFIX)


def map_path(spec: str) -> Path:
    """Where ``pretrained:NAME``'s module map lives once made: ``CACHE/maps/NAME.npz``."""
    return cache_dir() / "maps" / f"{_model_name(spec)}.npz"


def _expected(spec: str) -> tuple[str, list[str]]:
    """The map's SHA-256 and ``fit-module-map`` arguments, from the card.

    Raises:
        InputError: The model's graphs are not built with a module map.
    """
    construction = card_construction(spec)
    if construction.get("method") != "module-map" or "fit_module_map" not in construction:
        raise InputError(
            f"{PRETRAINED_PREFIX}{_model_name(spec)}: its graphs are not built with a module map "
            "(partgnn pretrained NAME shows how they are built)"
        )
    return str(construction["module_map_sha256"]), [str(a) for a in construction["fit_module_map"]]


def resolve_map(spec: str | os.PathLike[str]) -> Path:
    """The module map file ``spec`` names: ``pretrained:NAME`` is that model's map, made by
    :func:`make_map` (and checked against the card's checksum); anything else a path.

    Raises:
        InputError: The model has no module map, it is not made yet (the message gives the
            command), or the file is not the card's.
    """
    text = os.fspath(spec)
    if not text.startswith(PRETRAINED_PREFIX):
        return Path(spec)
    sha256, _ = _expected(text)
    path = map_path(text)
    if not path.is_file():
        raise InputError(
            f"{text}: its module map is not made on this machine yet: partgnn pretrained {text} "
            f"--make-map (fits it into {path}; 13 minutes on 2 cores)"
        )
    _check(path, sha256, text)
    return path


def make_map(spec: str, fit: Callable[[list[str], Path], None]) -> Path:
    """Fits ``pretrained:NAME``'s module map as its card records, into :func:`map_path`, and
    checks the file's SHA-256 against the card's; a map already made is checked and kept.

    Args:
        spec: ``NAME`` or ``pretrained:NAME``.
        fit: Runs ``partgnn fit-module-map`` with the card's arguments, writing the map to the
            path given (the CLI's command; raises on failure).

    Raises:
        InputError: No module map for this model, or the fitted (or present) file is not the
            card's.
    """
    spec = PRETRAINED_PREFIX + _model_name(spec)
    sha256, arguments = _expected(spec)
    path = map_path(spec)
    if path.is_file():
        _check(path, sha256, spec)
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fitted = path.with_name(f".{path.name}.fitting.npz")
    fitted.unlink(missing_ok=True)
    try:
        fit(arguments, fitted)
        _check(fitted, sha256, spec)
        shutil.move(fitted, path)
    finally:
        fitted.unlink(missing_ok=True)
    return path


def _check(path: Path, sha256: str, spec: str) -> None:
    from partgnn.data.h5_files import file_sha256

    found = file_sha256(path)
    if found != sha256:
        raise InputError(
            f"{path}: not {spec}'s module map (sha256 {found[:12]}..., the card's "
            f"{sha256[:12]}...): remove it and make it again with partgnn pretrained {spec} "
            "--make-map"
        )
