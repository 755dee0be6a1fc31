"""What ``partgnn evaluate`` found: the record :func:`~partgnn.metrics.evaluation.evaluate_scores`
returns, the JSON it writes (``--out``; ``evaluation.json`` in a run directory), and its one
reader.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from partgnn import json_files
from partgnn.data.files.model_card import HeldOutFigures
from partgnn.data.files.output_files import atomic_output
from partgnn.data.files.output_kinds import EVALUATION_FORMAT
from partgnn.errors import InputError
from partgnn.metrics.construction import ConstructionMetrics
from partgnn.metrics.edge_metrics import EdgeMetrics
from partgnn.metrics.tracks import TrackMetrics

#: The evaluation ``partgnn evaluate`` stores in a run directory (optional).
EVALUATION_NAME = "evaluation.json"

#: The figures a model card quotes from an evaluation, by section (a card names each
#: ``SECTION_NAME``, e.g. ``track_efficiency_atlas``).
CARD_FIGURES = {
    "edge": ("efficiency", "target_efficiency", "purity", "masked_purity", "auc"),
    "track": ("efficiency", "efficiency_atlas", "fake_rate", "impure_rate", "duplicate_rate"),
    "construction": ("efficiency", "beam_line_efficiency"),
}

NAN = json_files.NAN


@dataclass(frozen=True)
class EvaluationResults:
    """Edge and track metrics of a scores file over its events.

    Attributes:
        edge: The edge figures (efficiency, purity, AUC, edge counts...).
        track: The track figures (efficiency, fake rate, TrackML score...).
        construction: The fraction of the events' target doublets the graphs hold, and its
            counts (``None``: no events file given).
        scores: The scores file evaluated.
        graphs: The graphs file its edges belong to.
        events: Events evaluated.
        cut: The score cut applied (NaN: not recorded).
        cut_source: Where the cut came from (``--cut``, the model's training, a target...).
        track_building: How tracks were built (``components``...).
        target_pt: The target particles' ``(pt_min, pt_max)`` [GeV] (``pt_max`` ``None``:
            no upper bound).

    The files of older partgnn lack some of the fields after ``construction``: they read as
    ``None`` (``cut``: NaN).
    """

    edge: EdgeMetrics
    track: TrackMetrics
    construction: ConstructionMetrics | None = None
    scores: str | None = None
    graphs: str | None = None
    events: int | None = None
    cut: float = NAN
    cut_source: str | None = None
    track_building: str | None = None
    target_pt: tuple[float, float | None] | None = None

    def held_out_figures(self) -> HeldOutFigures:
        """The figures a model card quotes from this evaluation (:data:`CARD_FIGURES`; the
        construction's only where the evaluation counted it)."""
        sections = {"edge": self.edge, "track": self.track, "construction": self.construction}
        return HeldOutFigures(
            events=self.events,
            cut=self.cut,
            target_pt=self.target_pt or (1.0, None),
            figures={
                f"{section}_{name}": getattr(sections[section], name)
                for section, names in CARD_FIGURES.items()
                if sections[section] is not None
                for name in names
            },
        )

    def as_json(self) -> dict[str, Any]:
        """The content of the written file."""
        record = {"format": EVALUATION_FORMAT, **dataclasses.asdict(self)}
        if self.target_pt is not None:
            record["target_pt"] = list(self.target_pt)
        return record

    def write(self, path: str | os.PathLike[str]) -> None:
        """Writes the results to ``path`` (atomically; strict JSON: undefined numbers ``null``)."""
        with atomic_output(path) as tmp:
            tmp.write_text(json_files.dumps(self.as_json(), indent=2, sort_keys=True) + "\n")

    @classmethod
    def of_json(cls, content: Any, where: str) -> EvaluationResults:
        """The results ``content`` (a parsed evaluation file) holds.

        Raises:
            InputError: Not an object, or a field missing or of the wrong type (one line
                naming ``where`` and the field).
        """
        if not isinstance(content, dict):
            raise InputError(f"{where}: expected a JSON object, got {type(content).__name__}")

        def field(key: str, kinds: type | tuple[type, ...], *, optional: bool = True) -> Any:
            value = content.get(key)
            if value is None and optional:
                return None
            if isinstance(value, bool) or not isinstance(value, kinds):
                raise InputError(f"{where}: {key} is missing or malformed (got {value!r:.40})")
            return value

        target_pt = content.get("target_pt")
        if target_pt is not None and not (
            isinstance(target_pt, list)
            and len(target_pt) == 2
            and all(v is None or isinstance(v, (int, float)) for v in target_pt)
        ):
            raise InputError(f"{where}: target_pt must be [pt_min, pt_max] (got {target_pt!r:.40})")
        cut = field("cut", (int, float))  # a NaN cut is written as null
        construction = field("construction", dict)
        return cls(
            edge=EdgeMetrics.of_json(field("edge", dict, optional=False), f"{where}: edge"),
            track=TrackMetrics.of_json(field("track", dict, optional=False), f"{where}: track"),
            construction=(
                None
                if construction is None
                else ConstructionMetrics.of_json(construction, f"{where}: construction")
            ),
            scores=field("scores", str),
            graphs=field("graphs", str),
            events=field("events", int),
            cut=NAN if cut is None else float(cut),
            cut_source=field("cut_source", str),
            track_building=field("track_building", str),
            target_pt=None if target_pt is None else (target_pt[0], target_pt[1]),
        )

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> EvaluationResults:
        """Reads an evaluation file.

        Raises:
            InputError: Missing, unreadable, not JSON, or not an evaluation (one line naming
                the file).
        """
        return cls.of_json(json_files.read_file(path), str(path))

    @classmethod
    def read_if_present(cls, path: str | os.PathLike[str]) -> EvaluationResults | None:
        """:meth:`read`, or ``None`` where there is no file."""
        return cls.read(path) if Path(path).exists() else None
