"""A TorchScript file whose bytes depend only on the model: exporting it again writes it again.

Three things made two exports of one model differ: the archive's folder inside the zip is named
after the file written (the staging file's name holds the host and the process), torch writes
a random ``.data/serialization_id`` record, and TorchScript's compiler lists a module's
constants (``__constants__``, ``Final``) in a set's order, which is Python's string hashing's
(``PYTHONHASHSEED``, random per process). Here the file is saved through a buffer (its folder
is ``archive``), the constants are compiled in sorted order, and the identifier is the
SHA-256 of the rest of the file, written in place with its CRC-32s mended.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import struct
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

import torch

#: The record torch's zip writer fills with a random identifier.
SERIALIZATION_ID = ".data/serialization_id"


def save_scripted(module: torch.nn.Module, path: Path, extra_files: dict[str, str]) -> None:
    """Scripts ``module`` and writes it to ``path`` with ``extra_files``, reproducibly.

    Args:
        module: The module to script (``torch.jit.script``).
        path: The file to write.
        extra_files: TorchScript extra files (name -> text), as ``torch.jit.save`` takes them.
    """
    with _constants_in_sorted_order():
        scripted = torch.jit.script(module)
    buffer = io.BytesIO()
    torch.jit.save(scripted, buffer, extra_files)
    path.write_bytes(with_content_identifier(buffer.getvalue()))


class _SortedIterationSet(set):
    """A set that iterates in sorted order (in insertion order where elements do not compare)."""

    def __iter__(self) -> Iterator:
        items = list(super().__iter__())
        try:
            return iter(sorted(items))
        except TypeError:
            return iter(items)


@contextlib.contextmanager
def _constants_in_sorted_order() -> Iterator[None]:
    """While open, the TorchScript compiler's sets (of a module's constants) iterate sorted.

    torch.jit._recursive builds them with the builtin ``set``; a module-level name shadows it
    there only. A torch that builds them otherwise is left as it is (the constants' order is
    then its own)."""
    from torch.jit import _recursive

    shadowed = "set" in vars(_recursive)
    previous = vars(_recursive).get("set")
    _recursive.set = _SortedIterationSet  # type: ignore[attr-defined]
    try:
        yield
    finally:
        if shadowed:
            _recursive.set = previous  # type: ignore[attr-defined]
        else:
            del _recursive.set  # type: ignore[attr-defined]


def with_content_identifier(data: bytes) -> bytes:
    """``data`` (a torch zip archive) with its random serialization identifier replaced by one
    derived from its content (the same length; the record's CRC-32 mended in its local header
    and in the central directory). An archive without the record, or with it compressed, is
    returned as it is."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        found = [i for i in archive.infolist() if i.filename.endswith("/" + SERIALIZATION_ID)]
        if len(found) != 1 or found[0].compress_type != zipfile.ZIP_STORED:
            return data
        info, directory = found[0], archive.start_dir
    local = info.header_offset
    name_length, extra_length = struct.unpack_from("<HH", data, local + 26)
    start = local + 30 + name_length + extra_length
    size = info.file_size
    blanked = data[:start] + b"0" * size + data[start + size :]
    digest = hashlib.sha256(blanked).hexdigest()
    identifier = str(int(digest, 16)).rjust(size, "0")[-size:].encode()
    crc = struct.pack("<I", zlib.crc32(identifier))
    mended = bytearray(data)
    mended[start : start + size] = identifier
    mended[local + 14 : local + 18] = crc
    entry = _central_entry(mended, directory, info.filename)
    mended[entry + 16 : entry + 20] = crc
    return bytes(mended)


def _central_entry(data: bytearray, directory: int, name: str) -> int:
    """The offset of ``name``'s entry in the central directory that starts at ``directory``."""
    offset = directory
    while data[offset : offset + 4] == b"PK\x01\x02":
        name_length, extra_length, comment_length = struct.unpack_from("<HHH", data, offset + 28)
        if data[offset + 46 : offset + 46 + name_length].decode() == name:
            return offset
        offset += 46 + name_length + extra_length + comment_length
    raise ValueError(f"{name}: not in the archive's central directory")
