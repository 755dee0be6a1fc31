"""How a graphs file was built, as a model's checkpoint names it: a model trained on graphs of
one construction (the geometric builder at a pT cut, or one module map, named by its file's
SHA-256) scores graphs of another far worse than its card says, so scoring them says so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

#: What a construction names: the builder, the module map's checksum, the builder's pT cut.
CONSTRUCTION_KEYS = ("method", "module_map_sha256", "pt_min")


def graph_construction(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The construction a graphs file records (``build-graphs``' attributes): ``method``,
    ``module_map_sha256`` (``None`` for the geometric builder, or a file from before it was
    recorded) and the builder's ``pt_min``."""
    config = attrs.get("config", {})
    if isinstance(config, (str, bytes)):
        config = json.loads(config)
    return {
        "method": str(attrs.get("method", "geometric")),
        "module_map_sha256": attrs.get("module_map_sha256"),
        "pt_min": config.get("pt_min"),
    }


def describe(construction: Mapping[str, Any]) -> str:
    """``"module-map (map sha256 0a1b2c3d4e5f...)"``, ``"geometric (pT >= 1 GeV)"``."""
    method = construction.get("method", "?")
    if method == "module-map":
        sha = construction.get("module_map_sha256")
        return f"module-map (map sha256 {sha[:12]}...)" if sha else "module-map (map not recorded)"
    pt_min = construction.get("pt_min")
    return f"{method} (pT >= {pt_min:g} GeV)" if pt_min else f"{method} (every hit)"


def construction_mismatch(
    expected: Mapping[str, Any] | None, found: Mapping[str, Any]
) -> str | None:
    """What differs between the construction a checkpoint expects and a graphs file's, in
    words (``None``: the same, or the checkpoint names none). Only the keys ``expected``
    names are compared."""
    if not expected:
        return None
    differs = [
        key for key in CONSTRUCTION_KEYS if key in expected and expected[key] != found.get(key)
    ]
    if not differs:
        return None
    return f"built by {describe(found)}, the model expects {describe(expected)}"
