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


#: Seeds are stored in the files' attributes as int64.
MAX_SEED = 2**63 - 1


def seed(text: str) -> int:
    """A random seed: an integer in [0, 2**63 - 1] (numpy's generators take no negative
    seed, and the files store it as int64)."""
    value = int(text)
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be an integer in [0, 2**63 - 1] (got {text})")
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


def _in_unit_interval(text: str, what: str, *, zero: bool, one: bool) -> float:
    """A number between 0 and 1, each end included as ``zero`` and ``one`` say."""
    value = float(text)
    above = value >= 0.0 if zero else value > 0.0
    below = value <= 1.0 if one else value < 1.0
    if not (above and below):
        interval = f"{'[' if zero else '('}0, 1{']' if one else ')'}"
        raise argparse.ArgumentTypeError(f"must be {what}in {interval} (got {text})")
    return value


def fraction(text: str) -> float:
    """A number in [0, 1)."""
    return _in_unit_interval(text, "", zero=True, one=False)


def efficiency_target(text: str) -> float:
    """A target efficiency in (0, 1] (0 would keep no edge in particular)."""
    return _in_unit_interval(text, "an efficiency ", zero=False, one=True)


def rate_target(text: str) -> float:
    """A target rate in [0, 1) (1 would hold at any cut)."""
    return _in_unit_interval(text, "a rate ", zero=True, one=False)


def score(text: str) -> float:
    """An edge score cut in [0, 1]."""
    return _in_unit_interval(text, "a score ", zero=True, one=True)
