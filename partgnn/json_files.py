"""Strict JSON out: every number finite, ``null`` for a value that is not a number.

Python's ``json`` writes ``NaN`` and ``Infinity``, which are not JSON: strict readers (``jq``,
JavaScript's ``JSON.parse``, most languages' parsers) refuse the whole file. Every JSON file
partgnn writes (run summaries, evaluations, shard metadata, input scalings, ``--json``
output) goes through :func:`dumps`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from partgnn.errors import InputError, first_line

#: The one NaN object the readers below return, so that a record read from a file compares
#: equal to the record written (``nan == nan`` is false, but a tuple holding the same object
#: compares equal).
NAN = float("nan")


def strict(value: Any) -> Any:
    """``value`` with every non-finite float (Python or numpy) replaced by ``None``, recursively
    through dicts, lists and tuples; numpy scalars become Python numbers."""
    if isinstance(value, dict):
        return {key: strict(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(item) for item in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def dumps(value: Any, **options: Any) -> str:
    """``json.dumps`` of :func:`strict` ``(value)``, refusing anything that is still not JSON.

    Args:
        value: What to write.
        **options: ``json.dumps``'s (``indent``, ``sort_keys``, ``default``...).
    """
    return json.dumps(strict(value), allow_nan=False, **options)


def read_file(path: str | os.PathLike[str], *, missing: str = "not found") -> Any:
    """The JSON content of the file ``path`` (``NaN`` accepted, as older partgnn wrote it).

    Args:
        path: The file.
        missing: What the error says of a file that is not there.

    Raises:
        InputError: Missing, unreadable or not JSON: one line naming the file.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InputError(f"{path}: {missing}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read ({first_line(err)})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None


def number(value: Any) -> float:
    """A JSON value as a float: :data:`NAN` for ``null`` (how :func:`dumps` writes NaN), a value
    that is not a number (``true`` included) or one that is not finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return NAN
    return float(value) if math.isfinite(value) else NAN


def numbers(content: dict[str, Any], names: Iterable[str], where: str) -> dict[str, float]:
    """The numbers ``names`` of a JSON object, by name: :data:`NAN` where absent or ``null``.

    Raises:
        InputError: A value that is neither a number nor ``null`` (one line naming ``where``
            and the field).
    """
    found = {}
    for name in names:
        value = content.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise InputError(f"{where}: {name} must be a number (got {value!r:.40})")
        found[name] = number(value)
    return found


def counts(
    content: dict[str, Any], names: Iterable[str], where: str, *, required: bool = False
) -> dict[str, int]:
    """The whole numbers ``names`` of a JSON object, by name (0 where absent, unless
    ``required``). Counts written as floats (``12.0``) are read as integers.

    Raises:
        InputError: A value that is not a whole number, or a required one absent (one line
            naming ``where`` and the field).
    """
    found = {}
    for name in names:
        value = content.get(name)
        if value is None and not required:
            value = 0
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"{where}: {name} must be a whole number (got {value!r:.40})")
        found[name] = value
    return found
