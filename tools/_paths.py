"""Paths the benchmark scripts share: the shipped configs and the real TrackML sample."""

from __future__ import annotations

from pathlib import Path

from partgnn.resources import configs_dir, trackml_sample_dir

#: The real TrackML sample event, the repository's test data (``$PARTGNN_TRACKML_SAMPLE`` wins).
SAMPLE_DEFAULT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "trackml-sample"


def shipped_config(name: str) -> Path:
    """The shipped run-config template ``name`` (e.g. ``recipe``)."""
    return configs_dir() / f"{name}.yaml"


def sample_dir() -> Path | None:
    """The real TrackML sample event's folder, or ``None`` when there is none."""
    return trackml_sample_dir(SAMPLE_DEFAULT)
