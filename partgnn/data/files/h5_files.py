"""Checksummed HDF5: the primitives every partgnn file is written and read with.

Every dataset carries a Fletcher-32 checksum that HDF5 verifies on every read (:func:`read_array`
turns a mismatch into one line naming the file and the dataset); files use the HDF5 1.10 object
format (:data:`LIBVER`), whose object headers, and so the attributes, carry checksums too;
strings are stored fixed-length, in the header, rather than in the unchecked global heap
(:func:`write_attrs`). Files are opened lazily, again in every process that reads them
(:class:`LazyH5File`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import h5py
import numpy as np

from partgnn.errors import InputError, first_line
from partgnn.version import __version__

#: HDF5 file format bounds of the files partgnn writes: 1.10's object headers carry checksums.
LIBVER = ("v110", "v110")

#: Group of an event's graph holding fields kept from where the graph came from.
EXTRA_GROUP = "extra"

# Below this many elements compression costs more than it saves.
_COMPRESS_MIN_ELEMENTS = 1024


def event_key(event_id: int) -> str:
    """Group name of an event: TrackML style, ``event000000001``."""
    return f"event{int(event_id):09d}"


def file_sha256(path: str | os.PathLike[str], chunk_bytes: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes, read in chunks (for provenance of derived files)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


class LazyH5File:
    """An HDF5 file opened read-only on first use, and again in every process that uses it.

    h5py handles must not cross a fork (DataLoader workers, multiprocessing), so the handle is
    reopened when the process id changes; pickling drops it.

    Args:
        path: The file.
        missing: What the error says when the file does not exist (``"file not found"``).
    """

    def __init__(self, path: Path, missing: str = "file not found") -> None:
        self.path = path
        self.missing = missing
        self._file: h5py.File | None = None
        self._pid: int | None = None

    def get(self) -> h5py.File:
        if self._file is None or self._pid != os.getpid():
            if not self.path.exists():
                raise InputError(f"{self.path}: {self.missing}")
            try:
                self._file = h5py.File(self.path, "r")
            except OSError as err:
                raise InputError(
                    f"{self.path}: not a readable HDF5 file ({first_line(err)})"
                ) from None
            self._pid = os.getpid()
        return self._file

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_file": None, "_pid": None}


@contextlib.contextmanager
def damaged_file_errors(path: Path, where: str = "") -> Iterator[None]:
    """Turns the errors h5py raises on a damaged file (a header failing its checksum, an index
    that cannot be decoded) into one-line InputErrors naming the file (and event)."""
    try:
        yield
    except (KeyError, OSError, ValueError, RuntimeError) as err:
        place = f"{path}: {where}" if where else f"{path}"
        raise InputError(
            f"{place}: damaged HDF5 structure ({first_line(err).strip(chr(39))}; the file is "
            "corrupted)"
        ) from None


def verify_datasets(path: Path, h5: h5py.File) -> int:
    """Reads every dataset of an open file, so each one's checksum (fletcher32) is checked;
    returns how many were read.

    Raises:
        InputError: A dataset fails its checksum or cannot be decoded (one line naming the file
            and the dataset).
    """
    names: list[str] = []
    h5.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
    for name in names:
        parent, _, leaf = f"/{name}".rpartition("/")
        with damaged_file_errors(path, name):
            read_array(h5[parent or "/"], leaf)
    return len(names)


def group_nbytes(group: h5py.Group) -> int:
    """Decoded bytes of every dataset under an HDF5 group (sizes from the index alone), but for
    the kept fields of :data:`EXTRA_GROUP`, which training never decodes."""
    total = 0

    def add(name: str, obj: object) -> None:
        nonlocal total
        if isinstance(obj, h5py.Dataset) and name.split("/")[0] != EXTRA_GROUP:
            total += int(obj.size) * obj.dtype.itemsize

    group.visititems(add)
    return total


def write_root_attrs(
    h5: h5py.File,
    fmt: str,
    provenance: dict[str, object] | None,
    *,
    version: int,
    timestamp: bool = True,
) -> None:
    """Writes the common root attributes (format, version, provenance) of a partgnn file.

    ``timestamp=False`` leaves out the creation time, for files that must be reproducible.
    """
    common: dict[str, object] = {
        "format": fmt,
        "format_version": version,
        "partgnn_version": __version__,
    }
    if timestamp:
        common["created"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    write_attrs(h5, {**common, **(provenance or {})})


def create_h5(path: str | os.PathLike[str]) -> h5py.File:
    """A new HDF5 file in the checksummed object format (:data:`LIBVER`), open for writing."""
    return h5py.File(path, "w", libver=LIBVER)


def write_attrs(obj: h5py.HLObject, attrs: dict[str, object]) -> None:
    """Stores numbers as they are and anything else as a fixed-length UTF-8 string (JSON for
    what is not a string), which lives in the checksummed object header."""
    for key, value in attrs.items():
        if isinstance(value, (bool, int, float, np.integer, np.floating)):
            obj.attrs[key] = value
        else:
            text = (
                value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
            )
            encoded = text.encode()
            obj.attrs.create(
                key, np.array(encoded), dtype=h5py.string_dtype("utf-8", max(1, len(encoded)))
            )


def write_array(group: h5py.Group, name: str, array: np.ndarray) -> None:
    """Writes a dataset with a Fletcher-32 checksum, compressed when that pays (the checksum
    covers the stored, compressed bytes)."""
    options = {}
    if array.size >= _COMPRESS_MIN_ELEMENTS:
        options = {"compression": "gzip", "compression_opts": 4, "shuffle": True}
    group.create_dataset(name, data=np.ascontiguousarray(array), fletcher32=True, **options)


def read_array(group: h5py.Group, name: str) -> np.ndarray:
    """A dataset's values, its checksum verified (HDF5 checks Fletcher-32 on every read).

    Raises:
        InputError: One line naming the file and the dataset when it is missing, fails its
            checksum or cannot be decoded.
    """
    path = f"{group.name.rstrip('/')}/{name}"
    try:
        dataset = group[name]
    except KeyError:
        raise InputError(f"{group.file.filename}: dataset {path} is missing") from None
    try:
        return dataset[()]
    except OSError:
        raise InputError(
            f"{group.file.filename}: dataset {path} fails its checksum or cannot be decoded "
            "(the file is corrupted)"
        ) from None


def decode_attr(value: object) -> object:
    """An HDF5 attribute as a plain Python value (bytes -> str, numpy scalar -> item)."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.generic):
        return value.item()
    return value
