"""The integrity check of zip-based files (torch checkpoints, numpy ``.npz``): every record's
CRC-32, which ``torch.load`` never verifies.

A torch checkpoint is a zip archive whose records (the pickle and one per tensor storage) each
carry a CRC-32 written by ``torch.save``; a byte flipped inside a tensor record loads silently
as a different weight. :func:`check_zip_records` reads every record once and compares.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

from partgnn.errors import InputError, first_line


def check_zip_records(path: str | os.PathLike[str]) -> None:
    """Verifies the CRC-32 of every record of a zip file; a file that is not a zip is left to
    its reader (an old-style torch file, or garbage that the reader refuses in its own words).

    Raises:
        InputError: One line naming the file and the first record whose bytes do not match
            their CRC-32, or a damaged archive directory.
    """
    path = Path(path)
    if not zipfile.is_zipfile(path):
        return
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as err:
        raise InputError(
            f"{path}: damaged archive ({first_line(err)}; the file is corrupted)"
        ) from None
    if bad is not None:
        raise InputError(f"{path}: record {bad} fails its CRC-32 check (the file is corrupted)")
