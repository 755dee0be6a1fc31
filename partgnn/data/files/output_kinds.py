"""The one rule for replacing an output: a command replaces what it wrote itself, and anything
else only with ``--overwrite``.

Every kind of file partgnn writes is recognised by its content (:class:`OutputKind`): HDF5 files
by their ``format`` attribute, evaluations and module maps by theirs, plots and reports by the
mark partgnn writes into them, exported models by the calling convention inside them. A command
names the kind it writes; before any work, :func:`check_replace` lets it replace an existing file
of that kind (and says so in one line), and refuses anything else there (a user's text file, a
plot of their own, a file of another kind) unless the user passed ``--overwrite``.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from partgnn.errors import InputError

#: The mark partgnn writes into the plots it draws (PNG ``Software``, PDF and SVG ``Creator``)
#: and at the end of the reports it writes: how a later run knows the file as its own.
WRITTEN_BY_PARTGNN = "written by partgnn"
#: The ``format`` of an evaluation file (``partgnn evaluate --out``).
EVALUATION_FORMAT = "partgnn-evaluation"
#: How many bytes of a plot or report are searched for :data:`WRITTEN_BY_PARTGNN`.
_MARK_SEARCH_BYTES = 1 << 16


#: Plot formats whose metadata keeps :data:`WRITTEN_BY_PARTGNN` readable in the file.
PLOT_FORMATS = ("png", "pdf", "svg")


def plot_metadata(fmt: str) -> dict[str, str]:
    """The ``savefig`` metadata that marks a plot of format ``fmt`` as partgnn's."""
    return {"Software" if fmt == "png" else "Creator": f"{WRITTEN_BY_PARTGNN} (matplotlib)"}


def report_mark() -> str:
    """The last line of a markdown report partgnn writes (an HTML comment: not shown)."""
    return f"<!-- {WRITTEN_BY_PARTGNN}: running the command again replaces this file -->"


@dataclass(frozen=True)
class OutputKind:
    """A kind of file partgnn writes, and how to recognise one.

    Attributes:
        name: What it is, in a sentence (``a partgnn-graphs file``).
        recognises: Whether a file (which exists) is one of this kind that partgnn wrote.
    """

    name: str
    recognises: Callable[[Path], bool]


def _hdf5_attrs(path: Path) -> dict[str, str]:
    """The text attributes of an HDF5 file's root (empty: not HDF5)."""
    import h5py

    try:
        if not h5py.is_hdf5(path):
            return {}
        with h5py.File(path, "r") as h5:
            attrs = dict(h5.attrs)
    except (OSError, ValueError):
        return {}
    return {
        key: value.decode(errors="replace") if isinstance(value, bytes) else value
        for key, value in attrs.items()
        if isinstance(value, (bytes, str))
    }


def _hdf5_kind(fmt: str, source: str | None = None, name: str | None = None) -> OutputKind:
    def recognises(path: Path) -> bool:
        attrs = _hdf5_attrs(path)
        return attrs.get("format") == fmt and source in (None, attrs.get("source"))

    return OutputKind(name or f"a {fmt} file", recognises)


def _json_format(path: Path) -> str | None:
    try:
        with open(path, "rb") as handle:
            content = json.loads(handle.read(64 << 20))
    except (OSError, ValueError):
        return None
    value = content.get("format") if isinstance(content, dict) else None
    return value if isinstance(value, str) else None


def _has_mark(path: Path) -> bool:
    """Whether the file's first or last bytes hold :data:`WRITTEN_BY_PARTGNN`."""
    mark = WRITTEN_BY_PARTGNN.encode()
    try:
        with open(path, "rb") as handle:
            head = handle.read(_MARK_SEARCH_BYTES)
            size = os.fstat(handle.fileno()).st_size
            handle.seek(max(size - _MARK_SEARCH_BYTES, 0))
            tail = handle.read()
    except OSError:
        return False
    return mark in head or mark in tail


def _module_map(path: Path) -> bool:
    import numpy as np

    from partgnn.data.module_map.map_file import MAP_FORMAT

    try:
        with np.load(path, allow_pickle=False) as arrays:
            settings = json.loads(str(arrays["settings"]))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return False
    return isinstance(settings, dict) and settings.get("format") == MAP_FORMAT


def _exported_model(path: Path) -> bool:
    """A TorchScript or AOTInductor file with partgnn's calling convention (``partgnn.json``),
    or an ONNX file with it in its metadata."""
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as archive:
                return any(name.endswith("/partgnn.json") for name in archive.namelist())
        except (OSError, zipfile.BadZipFile):
            return False
    try:
        import onnx

        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # not ONNX (or no onnx installed): not an export of partgnn's
        return False
    return any(prop.key == "partgnn" for prop in model.metadata_props)


EVENTS = _hdf5_kind("partgnn-events")
TRACKML_EVENTS = _hdf5_kind(
    "partgnn-events", source="trackml", name="a partgnn-events file imported from TrackML"
)
GRAPHS = _hdf5_kind("partgnn-graphs")
SCORES = _hdf5_kind("partgnn-scores")
EVALUATION = OutputKind(
    "an evaluation partgnn wrote", lambda path: _json_format(path) == EVALUATION_FORMAT
)
MODULE_MAP = OutputKind("a module map", _module_map)
PLOT = OutputKind("a plot partgnn drew", _has_mark)
REPORT = OutputKind("a report partgnn wrote", _has_mark)
EXPORTED_MODEL = OutputKind("a model partgnn exported", _exported_model)
RUN_CONFIG = OutputKind("a run config partgnn translated", _has_mark)

#: Every kind, for saying what a file is.
KINDS = (EVENTS, GRAPHS, SCORES, EVALUATION, MODULE_MAP, PLOT, EXPORTED_MODEL)


def describe(path: Path) -> str:
    """What the file at ``path`` is, for a refusal: a kind partgnn writes, ``a file partgnn did
    not write``, or ``a folder``."""
    if path.is_dir():
        return "a folder"
    for kind in KINDS:
        if kind.recognises(path):
            return kind.name
    return "a file partgnn did not write"


def check_replace(
    path: str | os.PathLike[str], kind: OutputKind, *, command: str, overwrite: bool
) -> str | None:
    """Applies the rule for replacing an output, before any work.

    Args:
        path: The output file.
        kind: What ``command`` writes there.
        command: The command, as the user typed it (``build-graphs``), for the lines.
        overwrite: Whether the user passed ``--overwrite``.

    Returns:
        The line to say when an existing file is replaced (``None``: nothing is there).

    Raises:
        InputError: Something that is not ``kind`` is there and ``overwrite`` is false; or a
            folder is there (never replaced by a file).
    """
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return None
    if path.is_dir():
        raise InputError(f"{path}: is a folder; give the path of the file to write")
    if kind.recognises(path):
        return f"partgnn: {command}: replacing {path} ({kind.name})"
    what = describe(path)
    if not overwrite:
        raise InputError(
            f"{path}: exists ({what}); {command} replaces only {kind.name} without "
            "--overwrite: choose another output, or add --overwrite"
        )
    return f"partgnn: {command}: replacing {path} ({what}; --overwrite)"
