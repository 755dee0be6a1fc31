"""One collision event in TrackML's three tables (hits, truth, particles), simulated or real.

The same :class:`Event` comes out of ``partgnn simulate`` and ``partgnn import-trackml``, so real
and simulated events are interchangeable downstream. Column names and dtypes follow the TrackML
CSV files.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from partgnn.data.formats.cluster_shapes import CLUSTER_COLUMNS
from partgnn.errors import InputError

#: Hit table: one row per hit.
HIT_COLUMNS: dict[str, np.dtype] = {
    "hit_id": np.dtype(np.int64),
    "x": np.dtype(np.float32),
    "y": np.dtype(np.float32),
    "z": np.dtype(np.float32),
    "volume_id": np.dtype(np.int32),
    "layer_id": np.dtype(np.int32),
    "module_id": np.dtype(np.int32),
}

#: Truth table: one row per hit, same order as the hit table. particle_id 0 marks noise.
TRUTH_COLUMNS: dict[str, np.dtype] = {
    "hit_id": np.dtype(np.int64),
    "particle_id": np.dtype(np.int64),
    "tx": np.dtype(np.float32),
    "ty": np.dtype(np.float32),
    "tz": np.dtype(np.float32),
    "tpx": np.dtype(np.float32),
    "tpy": np.dtype(np.float32),
    "tpz": np.dtype(np.float32),
    "weight": np.dtype(np.float32),
}

#: Particle table: one row per generated particle.
PARTICLE_COLUMNS: dict[str, np.dtype] = {
    "particle_id": np.dtype(np.int64),
    "particle_type": np.dtype(np.int32),
    "vx": np.dtype(np.float32),
    "vy": np.dtype(np.float32),
    "vz": np.dtype(np.float32),
    "px": np.dtype(np.float32),
    "py": np.dtype(np.float32),
    "pz": np.dtype(np.float32),
    "q": np.dtype(np.int32),
    "nhits": np.dtype(np.int32),
}

TABLES: dict[str, dict[str, np.dtype]] = {
    "hits": HIT_COLUMNS,
    "truth": TRUTH_COLUMNS,
    "particles": PARTICLE_COLUMNS,
}


@dataclass
class Event:
    """A collision event.

    Attributes:
        event_id: The event number (TrackML's ``event000001000`` is 1000).
        hits: Columns of :data:`HIT_COLUMNS`, one row per hit, shape ``(N_hits, 7)``.
        truth: Columns of :data:`TRUTH_COLUMNS`, row ``i`` belongs to ``hits`` row ``i``.
        particles: Columns of :data:`PARTICLE_COLUMNS`, one row per particle.
        attrs: Provenance (source, seed, pile-up, ...), stored as HDF5 attributes.
        clusters: The shape of each hit's cluster of cells, row ``i`` of ``hits`` row ``i``
            (:data:`~partgnn.data.formats.cluster_shapes.CLUSTER_COLUMNS`), or ``None`` for an event
            without cells.
    """

    event_id: int
    hits: pd.DataFrame
    truth: pd.DataFrame
    particles: pd.DataFrame
    attrs: dict[str, object] = field(default_factory=dict)
    clusters: pd.DataFrame | None = None

    @property
    def name(self) -> str:
        """TrackML-style name, e.g. ``event000001000``."""
        return f"event{self.event_id:09d}"

    def validate(self, where: str | None = None) -> None:
        """Checks columns, dtypes convertibility, row alignment, finiteness and references.

        Args:
            where: Names the file (and event) in error messages; defaults to the event name.

        Raises:
            InputError: One line naming the event, table and field that is wrong.
        """
        where = where or self.name
        for table_name, columns in TABLES.items():
            table = getattr(self, table_name)
            missing = [c for c in columns if c not in table.columns]
            if missing:
                raise InputError(f"{where}: {table_name} lacks column {missing[0]!r}")
            for column in columns:
                values = table[column].to_numpy()
                if not np.issubdtype(values.dtype, np.number):
                    raise InputError(
                        f"{where}: {table_name}.{column} is not numeric (dtype {values.dtype})"
                    )
                if np.issubdtype(values.dtype, np.floating) and not np.isfinite(values).all():
                    row = int(np.flatnonzero(~np.isfinite(values))[0])
                    raise InputError(f"{where}: {table_name}.{column} is not finite at row {row}")
        if self.clusters is not None:
            self._validate_clusters(where)
        if len(self.hits) != len(self.truth):
            raise InputError(
                f"{where}: truth has {len(self.truth)} rows but hits has {len(self.hits)}"
            )
        if not np.array_equal(self.hits["hit_id"].to_numpy(), self.truth["hit_id"].to_numpy()):
            raise InputError(f"{where}: truth.hit_id does not follow hits.hit_id row by row")
        if self.hits["hit_id"].duplicated().any():
            raise InputError(f"{where}: hits.hit_id has duplicates")
        if self.particles["particle_id"].duplicated().any():
            raise InputError(f"{where}: particles.particle_id has duplicates")
        particle_ids = self.truth["particle_id"].to_numpy()
        known = np.isin(particle_ids, self.particles["particle_id"].to_numpy()) | (
            particle_ids == 0
        )
        if not known.all():
            bad = int(particle_ids[np.flatnonzero(~known)[0]])
            raise InputError(f"{where}: truth.particle_id {bad} is not in the particles table")

    def _validate_clusters(self, where: str) -> None:
        clusters = self.clusters
        missing = [c for c in CLUSTER_COLUMNS if c not in clusters.columns]
        if missing:
            raise InputError(f"{where}: clusters lacks column {missing[0]!r}")
        if len(clusters) != len(self.hits):
            raise InputError(
                f"{where}: clusters has {len(clusters)} rows but hits has {len(self.hits)}"
            )
        for column in CLUSTER_COLUMNS:
            values = clusters[column].to_numpy()
            if not np.issubdtype(values.dtype, np.number) or not np.isfinite(values).all():
                raise InputError(f"{where}: clusters.{column} is not finite numbers")

    def normalized(self) -> Event:
        """Returns a copy with exactly the TrackML columns (and the cluster features, where
        the event has them), in order, cast to their dtypes."""
        tables = {}
        for table_name, columns in TABLES.items():
            table = getattr(self, table_name)
            tables[table_name] = _cast(table, columns)
        clusters = None if self.clusters is None else _cast(self.clusters, CLUSTER_COLUMNS)
        return Event(event_id=self.event_id, attrs=dict(self.attrs), clusters=clusters, **tables)


def _cast(table: pd.DataFrame, columns: dict[str, np.dtype]) -> pd.DataFrame:
    return pd.DataFrame(
        {c: table[c].to_numpy().astype(dtype, copy=False) for c, dtype in columns.items()}
    )
