"""Events simulated and graphs built on several processes are the ones one process makes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from partgnn.cli.main import main
from partgnn.data.files.storage import EventFile, GraphFile
from partgnn.data.graphs.graph_fields import GRAPH_FIELDS


def _run(*arguments: object) -> None:
    assert main([str(a) for a in arguments]) == 0


def test_workers_simulate_the_same_events_and_build_the_same_graphs(tmp_path: Path):
    simulate = ("simulate", "--events", "3", "--pileup", "4", "--seed", "5", "--module-planes")
    _run(*simulate, "--out", tmp_path / "one.h5")
    _run(*simulate, "--workers", "2", "--out", tmp_path / "two.h5")
    with EventFile(tmp_path / "one.h5") as one, EventFile(tmp_path / "two.h5") as two:
        assert one.event_ids == two.event_ids == [0, 1, 2]
        for a, b in zip(one, two, strict=True):
            for table in ("hits", "particles", "truth"):
                assert getattr(a, table).equals(getattr(b, table)), table

    events, module_map = tmp_path / "one.h5", tmp_path / "map.npz"
    _run("fit-module-map", events, "--pt-min", "0.5", "--triplets", "--out", module_map)
    for workers in ("1", "2"):
        _run("build-graphs", events, "--method", "module-map", "--map", module_map,
             "--workers", workers, "--out", tmp_path / f"graphs{workers}.h5")  # fmt: skip
    with GraphFile(tmp_path / "graphs1.h5") as one, GraphFile(tmp_path / "graphs2.h5") as two:
        assert one.event_ids == two.event_ids
        for index in range(len(one)):
            a, b = one[index], two[index]
            assert a.edge_index.shape[1] > 0
            for field in GRAPH_FIELDS:
                assert np.array_equal(a[field].numpy(), b[field].numpy()), field
            quality = {k: v for k, v in one.quality(index).items() if k != "seconds"}
            assert quality == {k: v for k, v in two.quality(index).items() if k != "seconds"}
