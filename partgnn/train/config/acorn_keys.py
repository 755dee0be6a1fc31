"""What the translation of acorn's keys shares (:mod:`partgnn.train.config.acorn_config`): the
state a key's handler writes to (:class:`AcornContext`) and the readers of acorn's values, each
refusing a bad one in one line naming the file and the key."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from partgnn.errors import InputError


@dataclass
class AcornContext:
    """One file's translation under way: acorn's settings, the partgnn config the handlers fill,
    and their notes.

    Attributes:
        acorn: The YAML's mapping.
        where: The file, for messages.
        pt_unit: The unit of ``pt`` in the weighting conditions.
        model: acorn's model class.
        config: The partgnn run config, section by section.
        notes: One line per acorn key not honoured, ``KEY: why``.
    """

    acorn: Mapping[str, Any]
    where: str
    pt_unit: str
    model: str
    config: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def note(self, line: str) -> None:
        """Adds one line to the notes."""
        self.notes.append(line)

    def fail(self, key: str, why: str) -> InputError:
        """The one-line error of ``key``."""
        return InputError(f"{self.where}: {key}: {why}")


def number(context: AcornContext, key: str, value: Any, *, positive: bool = True) -> float:
    """``value`` as a finite number (``positive``: > 0), else a one-line error naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise context.fail(key, f"must be a number (got {value!r})")
    if positive and value <= 0:
        raise context.fail(key, f"must be > 0 (got {value!r})")
    return float(value)


def whole_number(context: AcornContext, key: str, value: Any) -> int:
    """``value`` as a whole number >= 1, else a one-line error naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise context.fail(key, f"must be a whole number >= 1 (got {value!r})")
    return value


def flag(context: AcornContext, key: str, value: Any) -> bool:
    """``value`` as true or false, else a one-line error naming ``key``."""
    if not isinstance(value, bool):
        raise context.fail(key, f"must be true or false (got {value!r})")
    return value


def name_list(context: AcornContext, key: str, value: Any) -> list[str]:
    """``value`` as a non-empty list of names, else a one-line error naming ``key``."""
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise context.fail(key, f"must be a list of names (got {value!r})")
    return list(value)
