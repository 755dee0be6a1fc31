"""A shipped model's card (``partgnn/pretrained/NAME.yaml``) as one record with one reader
(:class:`ModelCard`): what the model is, how the graphs it scores are built
(:class:`CardConstruction`, with the map fit it records as a
:class:`~partgnn.data.module_map.recorded_fit.RecordedMapFit` the library can run again), its
score cut, how its figures built tracks, and the figures it was measured to reach. Cards of every
partgnn version read: a field a card lacks gets the value of the cards before it."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from partgnn.data.module_map.recorded_fit import RecordedMapFit
from partgnn.errors import InputError
from partgnn.resources import PRETRAINED_PREFIX, pretrained_card
from partgnn.yaml_files import read_yaml_file

#: How tracks are built on a card that does not say (the cards shipped before the field).
DEFAULT_TRACK_BUILDING = "components"


@dataclass(frozen=True)
class CardConstruction:
    """How a shipped model's graphs are built.

    Attributes:
        method: ``geometric`` (adjacent layers, a pT cut) or ``module-map``.
        pt_min: The geometric builder's pT cut [GeV] (0: every hit).
        module_map_sha256: The module map's SHA-256 (``module-map`` only).
        map_fit: The fit that made the map, which the library can run again (``module-map``
            only).
        module_map_file: The map's file beside the model (``None``: ``NAME.map.npz``).
        module_map_bytes: Its size.
        how: The commands, in words.
    """

    method: str
    pt_min: float = 0.0
    module_map_sha256: str | None = None
    map_fit: RecordedMapFit | None = None
    module_map_file: str | None = None
    module_map_bytes: int | None = None
    how: str = ""

    @property
    def by_module_map(self) -> bool:
        """Whether the graphs are built with a module map."""
        return self.method == "module-map"

    def as_yaml(self) -> dict[str, Any]:
        """The construction as a card holds it (:meth:`of_yaml` reads it back)."""
        entry: dict[str, Any] = {"method": self.method}
        if self.by_module_map:
            entry["module_map_sha256"] = self.module_map_sha256
        entry["pt_min"] = self.pt_min
        if self.map_fit is not None:
            entry["fit_module_map"] = list(self.map_fit.arguments)
        if self.module_map_file is not None:
            entry["module_map_file"] = self.module_map_file
            entry["module_map_bytes"] = self.module_map_bytes
        return {**entry, "how": self.how}

    @classmethod
    def of_yaml(cls, content: Mapping[str, Any], where: str) -> CardConstruction:
        """The construction a card's ``construction`` mapping records.

        Raises:
            InputError: No method, or a module-map construction without its map's checksum
                (one line naming ``where``).
        """
        method = content.get("method")
        if method not in ("geometric", "module-map"):
            raise InputError(f"{where}: construction.method {method!r}: geometric or module-map")
        sha256 = content.get("module_map_sha256")
        if method == "module-map" and not sha256:
            raise InputError(f"{where}: a module-map construction without module_map_sha256")
        arguments = content.get("fit_module_map")
        return cls(
            method=method,
            pt_min=float(content.get("pt_min") or 0.0),
            module_map_sha256=sha256,
            map_fit=None if arguments is None else RecordedMapFit.parse(arguments, where=where),
            module_map_file=content.get("module_map_file"),
            module_map_bytes=content.get("module_map_bytes"),
            how=str(content.get("how", "")),
        )


@dataclass(frozen=True)
class HeldOutFigures:
    """One ``held_out`` entry of a card: figures measured on events the model never saw.

    Attributes:
        events: Events evaluated (``None``: not recorded).
        cut: The score cut applied (NaN: not recorded).
        target_pt: The target particles' ``(pt_min, pt_max)`` [GeV] (``pt_max`` ``None``: no
            upper bound).
        figures: The figures by their card name (``edge_target_efficiency``,
            ``track_efficiency_atlas``...; ``None``: undefined).
    """

    events: int | None = None
    cut: float = math.nan
    target_pt: tuple[float, float | None] = (1.0, None)
    figures: Mapping[str, float | None] = field(default_factory=dict)

    def figure(self, name: str) -> float:
        """A figure (NaN: the entry has none by that name, or it is undefined)."""
        value = self.figures.get(name)
        return float(value) if isinstance(value, (int, float)) else math.nan

    def as_yaml(self) -> dict[str, Any]:
        """The entry as a card holds it (figures rounded to 4 digits; undefined ones ``null``)."""
        return {
            "events": self.events,
            "cut": self.cut,
            "target_pt": list(self.target_pt),
            **{name: _rounded(value) for name, value in self.figures.items()},
        }

    @classmethod
    def of_yaml(cls, content: Any, where: str) -> HeldOutFigures:
        """The entry a card's ``held_out`` mapping holds under one label.

        Raises:
            InputError: Not a mapping, a target pT band that is not ``[pt_min, pt_max]``, or a
                figure that is not a number (one line naming ``where``).
        """
        if not isinstance(content, Mapping):
            raise InputError(f"{where}: expected a mapping of figures")
        content = dict(content)
        events, cut = content.pop("events", None), content.pop("cut", None)
        band = content.pop("target_pt", None) or [1.0, None]
        if not (isinstance(band, list) and len(band) == 2):
            raise InputError(f"{where}: target_pt {band!r}: [pt_min, pt_max]")
        for name, value in content.items():
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float))
            ):
                raise InputError(f"{where}: {name} {value!r:.40}: a number")
        return cls(
            events=events if isinstance(events, int) else None,
            cut=float(cut) if isinstance(cut, (int, float)) else math.nan,
            target_pt=(float(band[0]), None if band[1] is None else float(band[1])),
            figures=content,
        )


def _rounded(value: float | None) -> float | None:
    if value is None or math.isnan(value):
        return None
    return round(float(value), 4)


@dataclass(frozen=True)
class ModelCard:
    """A shipped model's card.

    Attributes:
        name: The model's name (``pretrained:NAME``).
        path: The card's file.
        summary: Its one-paragraph summary (``partgnn pretrained`` lists it).
        score_cut: The edge score cut its figures were measured at (``None``: the card records
            none).
        track_building: How its figures built tracks.
        construction: How its graphs are built (``None``: the card records none).
        held_out: Its measured figures, by label (``simulated``, ``construction-limit``,
            ``trackml-sample``...).
        content: The whole card as YAML holds it (what ``partgnn pretrained NAME`` prints).
    """

    name: str
    path: Path
    summary: str
    score_cut: float | None
    track_building: str = DEFAULT_TRACK_BUILDING
    construction: CardConstruction | None = None
    held_out: Mapping[str, HeldOutFigures] = field(default_factory=dict)
    content: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def read(cls, name: str) -> ModelCard:
        """The card of ``NAME`` or ``pretrained:NAME``.

        Raises:
            InputError: No such model, or a card that does not read (one line).
        """
        path = pretrained_card(name)
        return cls.of_yaml(read_yaml_file(path, where=str(path)), path)

    @classmethod
    def of_yaml(cls, content: Any, path: Path) -> ModelCard:
        """The card a parsed YAML ``content`` holds (``path``: for messages; the track building
        it names is checked where tracks are built).

        Raises:
            InputError: Not a mapping, a score cut that is not a number between 0 and 1, or a
                construction that does not read (one line naming the file).
        """
        where = str(path)
        if not isinstance(content, Mapping):
            raise InputError(f"{where}: not a model card (expected a mapping)")
        cut = content.get("score_cut")
        if cut is not None and (
            isinstance(cut, bool) or not isinstance(cut, (int, float)) or not 0 < cut < 1
        ):
            raise InputError(f"{where}: score_cut {cut!r}: a number between 0 and 1")
        method = str(content.get("track_building", DEFAULT_TRACK_BUILDING))
        construction = content.get("construction")
        if construction:
            construction = CardConstruction.of_yaml(construction, where)
        return cls(
            name=str(content.get("name") or path.stem),
            path=path,
            summary=str(content.get("summary", "")),
            score_cut=None if cut is None else float(cut),
            track_building=method,
            construction=construction or None,
            held_out={
                str(label): HeldOutFigures.of_yaml(entry, f"{where}: held_out.{label}")
                for label, entry in (content.get("held_out") or {}).items()
            },
            content=dict(content),
        )

    @property
    def spec(self) -> str:
        """``pretrained:NAME``."""
        return PRETRAINED_PREFIX + self.name

    def figure(self, label: str, name: str) -> float:
        """A held-out figure (NaN: the card has none by that label and name)."""
        entry = self.held_out.get(label)
        return math.nan if entry is None else entry.figure(name)
