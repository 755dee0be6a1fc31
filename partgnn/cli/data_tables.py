"""What the data commands print besides their one-line results: the means of the events a command
simulated or imported (:class:`EventStats`), and the graphs' table of ``build-graphs`` and
``info`` (:func:`print_graph_table`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # light imports only: the pipeline is imported when a command runs
    from partgnn.data.event import Event


class EventStats:
    """Collects per-event counts while events stream past, then prints their means."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, float]] = []

    def track(self, events: Iterable[Event]) -> Iterator[Event]:
        """Counts each event's particles, hits and noise share as it passes."""
        for event in events:
            is_noise = event.truth["particle_id"].to_numpy() == 0
            noise = float(is_noise.mean()) if len(is_noise) else 0.0
            self.rows.append((len(event.particles), len(event.hits), noise))
            yield event

    def print(self, headline: str) -> None:
        """Prints ``headline``, then the events' means."""
        print(headline)
        if not self.rows:
            return
        import numpy as np

        particles, hits, noise = np.asarray(self.rows, dtype=float).T
        print(
            f"  per event: {particles.mean():,.0f} particles, {hits.mean():,.0f} hits "
            f"(min {hits.min():,.0f}, max {hits.max():,.0f}), noise fraction {noise.mean():.3f}"
        )


def print_graph_table(rows: list[dict[str, float]], *, by_map: bool = False) -> None:
    """The graphs' sizes, efficiency (of every true pair) and purity, one row per event; for
    graphs built by a module map also the efficiency over the pairs of the particles the map
    was fitted on (pT >= its fit's pT cut), what the map is to be judged by."""
    target_pt = float(rows[0].get("target_pt", 0.0)) if rows else 0.0
    target = by_map and target_pt > 0 and all("target_efficiency" in row for row in rows)
    header = f"{'event':>10} {'nodes':>9} {'edges':>10} {'efficiency':>10} {'purity':>8}"
    target_label = f"eff pT>={target_pt:g}"
    header += f" {target_label:>11}" if target else ""
    has_time = bool(rows) and "seconds" in rows[0]
    print(header + (f" {'seconds':>8}" if has_time else ""))
    columns = ("n_nodes", "n_edges", "efficiency", "purity", "target_efficiency")
    for row in [*rows, *([{"event_id": "mean", **_means(rows, columns)}] if len(rows) > 1
                         else [])]:  # fmt: skip
        mean = row["event_id"] == "mean"
        line = (
            f"{row['event_id']:>10} {row['n_nodes']:>9,.0f} {row['n_edges']:>10,.0f} "
            f"{row['efficiency']:>10.4f} {row['purity']:>8.4f}"
        )
        line += f" {row['target_efficiency']:>11.4f}" if target else ""
        print(line + (f" {row['seconds']:>8.2f}" if has_time and not mean else ""))


def _means(rows: list[dict[str, float]], columns: tuple[str, ...]) -> dict[str, float]:
    """The mean of each of ``columns`` present in every row."""
    present = [key for key in columns if all(key in row for row in rows)]
    return {key: sum(float(row[key]) for row in rows) / len(rows) for key in present}
