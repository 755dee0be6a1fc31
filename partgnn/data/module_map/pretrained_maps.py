"""The module maps that shipped models' graphs are built with.

A full-graph model's map ships with the package beside the model (``NAME.map.npz``, or the
file its card's ``module_map_file`` names, which models built with one map share; its size and
SHA-256 on the card), so ``build-graphs --map pretrained:NAME`` works on a fresh install
without a fit. The card also records the ``fit-module-map`` arguments that made it (events
simulated on the fly, so nothing else is needed; read as a
:class:`~partgnn.data.module_map.recorded_fit.RecordedMapFit`): :func:`make_map` (``partgnn
pretrained pretrained:NAME --make-map``) fits it again into partgnn's cache folder
(:func:`cache_dir`) and compares the refit with the card's map, bitwise and else by content
(:mod:`partgnn.data.module_map.compare`): a refit on another CPU may differ in the last bits of its
windows and is the same map all the same. A refit that is another map is kept, renamed, never
deleted.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from partgnn import resources
from partgnn.data.files.model_card import CardConstruction, ModelCard
from partgnn.data.files.output_files import make_folder
from partgnn.data.module_map.fit_time import say_fit_time
from partgnn.errors import InputError
from partgnn.resources import PRETRAINED_PREFIX

#: Suffix of a module map shipped beside its model (``NAME.map.npz``).
SHIPPED_MAP_SUFFIX = ".map.npz"

#: Environment variable naming partgnn's cache folder.
CACHE_DIR_ENV = "PARTGNN_CACHE"


def cache_dir() -> Path:
    """``$PARTGNN_CACHE``, else ``$XDG_CACHE_HOME/partgnn``, else ``~/.cache/partgnn``."""
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "partgnn"


def card_construction(name: str) -> CardConstruction | None:
    """How a shipped model's graphs are built, as its card records it (``None``: it records
    nothing)."""
    return ModelCard.read(name).construction


def _model_name(spec: str) -> str:
    return spec.removeprefix(PRETRAINED_PREFIX)


def map_path(spec: str) -> Path:
    """Where ``pretrained:NAME``'s refitted module map lives once made: ``CACHE/maps/NAME.npz``."""
    return cache_dir() / "maps" / f"{_model_name(spec)}.npz"


def shipped_map_path(spec: str, construction: CardConstruction | None = None) -> Path:
    """Where ``pretrained:NAME``'s module map ships: beside the model, as its card's
    ``module_map_file`` names it (models built with one map share its file), else
    ``NAME.map.npz`` (``construction``: the card's, when the caller has read it already).

    Raises:
        InputError: The card's ``module_map_file`` is not a file name.
    """
    if construction is None:
        construction = card_construction(spec)
    name = (construction.module_map_file if construction else None) or (
        f"{_model_name(spec)}{SHIPPED_MAP_SUFFIX}"
    )
    if Path(name).name != name or not name.endswith(SHIPPED_MAP_SUFFIX):
        raise InputError(
            f"{PRETRAINED_PREFIX}{_model_name(spec)}: its card's module_map_file {name!r} is not "
            f"a NAME{SHIPPED_MAP_SUFFIX} file beside the model"
        )
    return resources.pretrained_dir() / name


def _expected(spec: str) -> CardConstruction:
    """The card's module-map construction (its map's SHA-256 and the fit that made it).

    Raises:
        InputError: The model's graphs are not built with a module map.
    """
    construction = card_construction(spec)
    if construction is None or not construction.by_module_map or construction.map_fit is None:
        raise InputError(
            f"{PRETRAINED_PREFIX}{_model_name(spec)}: its graphs are not built with a module map "
            "(partgnn pretrained NAME shows how they are built)"
        )
    return construction


def resolve_map(spec: str | os.PathLike[str]) -> Path:
    """The module map file ``spec`` names: for ``pretrained:NAME`` the map shipped with that
    model (checked against the card's checksum), or where an installation lacks it the one
    :func:`make_map` made and accepted; anything else a path.

    Raises:
        InputError: The model has no module map, none is shipped or made (the message gives
            the command), or the shipped file is not the card's.
    """
    text = os.fspath(spec)
    if not text.startswith(PRETRAINED_PREFIX):
        return Path(spec)
    construction = _expected(text)
    shipped = shipped_map_path(text, construction)
    if shipped.is_file():
        _check_shipped(shipped, construction.module_map_sha256, text)
        return shipped
    path = map_path(text)
    if not path.is_file():
        raise InputError(
            f"{text}: its module map is neither shipped with this installation ({shipped}) nor "
            f"made on this machine: partgnn pretrained {text} --make-map (fits it into {path}; "
            "about half an hour on 2 cores)"
        )
    _check_made(path, text)
    return path


def make_map(spec: str, *, workers: int = 1) -> tuple[Path, str]:
    """Fits ``pretrained:NAME``'s module map as its card records, into :func:`map_path`, and
    compares it with the card's map: bitwise (its SHA-256), else by content with the shipped
    map (:func:`~partgnn.data.module_map.compare.compare_maps`).

    A map already made is compared again and kept. A fitted map that is another map is kept as
    ``NAME.differs.npz`` beside it, with the reason in ``NAME.differs.txt`` (never deleted: it
    took the fit's time), and refused.

    Args:
        spec: ``NAME`` or ``pretrained:NAME``.
        workers: Processes simulating the fit's events (the map is the same for any number);
            how long that takes here is said on stderr first.

    Returns:
        The map's path and one line saying how it compares with the card's.

    Raises:
        InputError: No module map for this model, or the fitted (or present) map is another.
    """
    spec = PRETRAINED_PREFIX + _model_name(spec)
    construction = _expected(spec)
    path = map_path(spec)
    if path.is_file():
        _check_made(path, spec)
        verdict, same = _compare(path, construction, spec)
        if not same:
            raise InputError(f"{path}: not {spec}'s module map ({verdict}); remove it to refit")
        return path, verdict
    make_folder(path.parent)
    fitted = path.with_name(f".{path.name}.fitting.npz")
    fitted.unlink(missing_ok=True)  # only a fit killed after it saved leaves one (atomic save)
    fit = construction.map_fit
    say_fit_time(dataclasses.replace(fit.simulated, workers=workers))
    fit.refit(fitted, workers=workers)
    verdict, same = _compare(fitted, construction, spec)
    if not same:
        kept = path.with_name(f"{path.stem}.differs.npz")
        os.replace(fitted, kept)
        kept.with_suffix(".txt").write_text(f"{verdict}\n")
        raise InputError(
            f"{kept}: the map fitted here is not {spec}'s ({verdict}); kept there, not used "
            f"(build-graphs --map {kept} would use it)"
        )
    os.replace(fitted, path)
    return path, verdict


def _compare(path: Path, construction: CardConstruction, spec: str) -> tuple[str, bool]:
    """How the map at ``path`` compares with the card's (``construction``), in one line, and
    whether it is the same map (bitwise, or in substance)."""
    from partgnn.data.files.h5_files import file_sha256
    from partgnn.data.module_map.compare import compare_maps
    from partgnn.data.module_map.map_file import ModuleMap

    sha256 = construction.module_map_sha256
    found = file_sha256(path)
    if found == sha256:
        return f"bitwise the card's map (sha256 {sha256[:12]}...)", True
    shipped = shipped_map_path(spec, construction)
    if not shipped.is_file():
        return (
            f"sha256 {found[:12]}..., the card's {sha256[:12]}..., and no shipped map here to "
            "compare its content with"
        ), False
    comparison = compare_maps(ModuleMap.load(path), ModuleMap.load(shipped))
    return f"{comparison.describe()} (against the shipped map, sha256 {found[:12]}...)", (
        comparison.same
    )


def _check_made(path: Path, spec: str) -> None:
    """Refuses a map in the cache that is damaged (truncated, a record failing its CRC-32),
    saying how to make it again.

    Raises:
        InputError: One line naming the file, what is wrong, and the command that refits it.
    """
    from partgnn.data.files.zip_records import check_zip_records
    from partgnn.data.module_map.map_file import check_map_file

    try:
        check_map_file(path)
        check_zip_records(path)
    except InputError as err:
        raise InputError(
            f"{err}; remove it to refit: partgnn pretrained {spec} --make-map"
        ) from None


def _check_shipped(path: Path, sha256: str, spec: str) -> None:
    from partgnn.data.files.h5_files import file_sha256

    found = file_sha256(path)
    if found != sha256:
        raise InputError(
            f"{path}: not {spec}'s module map (sha256 {found[:12]}..., the card's "
            f"{sha256[:12]}...): the installation is damaged; reinstall partgnn"
        )
