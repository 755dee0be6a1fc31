"""Number formatting shared by the report's tables, plots and findings."""

from __future__ import annotations

import math

# The object-oriented API (no pyplot) draws with Agg and never needs a display.


def close(a: float, b: float, *, tolerance: float = 1e-6) -> bool:
    return not (math.isnan(a) or math.isnan(b)) and abs(a - b) <= tolerance * max(1.0, abs(b))


def percent(value: float) -> str:
    """A fraction as a signed percentage (``+12.5%``); n/a when not recorded."""
    return "n/a" if value is None or math.isnan(value) else f"{100 * value:+.1f}%"


def fmt(value: float, spec: str) -> str:
    """A number for the report; NaN (undefined or not recorded) is "n/a"."""
    return "n/a" if value is None or math.isnan(value) else format(value, spec)


def cell(text: str) -> str:
    # A "|" in a run name would split the table cell.
    return text.replace("|", "\\|")
