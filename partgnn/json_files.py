"""Strict JSON out: every number finite, ``null`` for a value that is not a number.

Python's ``json`` writes ``NaN`` and ``Infinity``, which are not JSON: strict readers (``jq``,
JavaScript's ``JSON.parse``, most languages' parsers) refuse the whole file. Every JSON file
partgnn writes (run summaries, evaluations, shard metadata, input scalings, ``--json``
output) goes through :func:`dumps`.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np


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
