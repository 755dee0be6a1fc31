"""Where partgnn finds files that live beside the package: YAML configs and the TrackML sample.

Both sit in the source tree (``configs/`` in the repository, ``shared/data/trackml-sample`` beside
it); environment variables point elsewhere when partgnn runs outside a checkout.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Environment variable naming the folder that holds ``detector/trackml.yaml`` and run configs.
CONFIG_DIR_ENV = "PARTGNN_CONFIG_DIR"
#: Environment variable naming the folder of the real TrackML sample event.
SAMPLE_DIR_ENV = "PARTGNN_TRACKML_SAMPLE"

_REPOSITORY = Path(__file__).resolve().parents[2]


def config_dir() -> Path:
    """The folder of YAML configs: ``$PARTGNN_CONFIG_DIR`` or ``configs/`` of the source tree."""
    return Path(os.environ.get(CONFIG_DIR_ENV) or _REPOSITORY / "configs")


def trackml_sample_dir() -> Path:
    """The real TrackML sample event: ``$PARTGNN_TRACKML_SAMPLE`` or ``../shared/data/...``."""
    default = _REPOSITORY.parent / "shared" / "data" / "trackml-sample"
    return Path(os.environ.get(SAMPLE_DIR_ENV) or default)
