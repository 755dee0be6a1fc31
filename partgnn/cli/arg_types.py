"""Argument types that check ranges: a bad value is argparse's one usage error, before any work.

Standard library only (the parser must build without importing torch).
"""

from __future__ import annotations

import argparse
import math


def positive_int(text: str) -> int:
    """An integer >= 1 (counts: events, parts, workers, hidden size)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (got {value})")
    return value


def non_negative_int(text: str) -> int:
    """An integer >= 0 (hops of a margin)."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 (got {value})")
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0 (pile-up, pT thresholds)."""
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0 (got {text})")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (timeouts in seconds)."""
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0 (got {text})")
    return value


#: The shortest collective timeout [s] (:data:`partgnn.distributed.process_group.MIN_TIMEOUT_S`,
#: which the config's ``run.timeout_s`` and ``PARTGNN_DIST_TIMEOUT`` are held to as well).
MIN_TIMEOUT_S = 1.0


def timeout_seconds(text: str) -> float:
    """A finite number of seconds >= :data:`MIN_TIMEOUT_S` (a ``--timeout``)."""
    value = float(text) if _is_number(text) else math.nan
    if not (math.isfinite(value) and value >= MIN_TIMEOUT_S):
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds >= {MIN_TIMEOUT_S:g} (got {text})"
        )
    return value


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def fraction(text: str) -> float:
    """A number in [0, 1)."""
    value = float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1) (got {text})")
    return value


def score(text: str) -> float:
    """An edge score cut in [0, 1]."""
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a score in [0, 1] (got {text})")
    return value
