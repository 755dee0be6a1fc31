"""What a module map is fitted to: events files or events simulated on the fly, recorded by
what they hold, so the same events give the same map file, byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from partgnn.cli.main import main
from partgnn.data.files.h5_files import file_sha256
from partgnn.data.module_map.doublets import SimulatedRun
from partgnn.data.module_map.map_file import ModuleMap
from partgnn.errors import InputError


def _fit(tmp_path: Path, name: str, *inputs: str) -> Path:
    out = tmp_path / name
    assert main(["fit-module-map", *inputs, "--pileup", "3", "--pt-min", "0.5", "--triplets",
                 "--out", str(out)]) == 0  # fmt: skip
    return out


def test_the_same_events_simulated_or_read_give_the_same_map_file(tmp_path: Path, capsys):
    events = tmp_path / "somewhere" / "e.h5"
    events.parent.mkdir()
    assert main(["simulate", "--events", "2", "--pileup", "3", "--seed", "41",
                 "--first-event-id", "100", "--out", str(events)]) == 0  # fmt: skip
    from_file = _fit(tmp_path, "a.npz", str(events))
    said = capsys.readouterr().out
    assert f"(sha256 {file_sha256(from_file)})" in said
    simulated = _fit(tmp_path, "b.npz", "--simulate", "41:100:2", "--workers", "2")
    assert file_sha256(simulated) == file_sha256(from_file)
    # The record holds what made the events, not where they were written.
    source = ModuleMap.load(from_file).settings["sources"][0]
    assert str(tmp_path) not in json.dumps(ModuleMap.load(from_file).settings)
    assert source["events"] == 2 and source["event_ids"] == [100, 101]
    assert source["provenance"]["seed"] == 41 and source["provenance"]["source"] == "simulation"
    # Other events give another map; a file and a simulated run together are both recorded.
    other = _fit(tmp_path, "c.npz", "--simulate", "41:102:2")
    assert file_sha256(other) != file_sha256(from_file)
    both = ModuleMap.load(_fit(tmp_path, "d.npz", str(events), "--simulate", "41:102:2"))
    assert both.settings["events"] == 4 and len(both.settings["sources"]) == 2
    assert not np.array_equal(both.count, ModuleMap.load(from_file).count)


@pytest.mark.parametrize("text", ["41:100", "a:1:2", "41:100:0", "-1:0:5", "1:2:3:4"])
def test_a_bad_simulated_run_is_one_line(text: str, capsys):
    with pytest.raises(InputError, match="expected SEED:FIRST_EVENT_ID:EVENTS"):
        SimulatedRun.parse(text)
    assert main(["fit-module-map", f"--simulate={text}", "--out", "x.npz"]) == 2
    err = capsys.readouterr().err.strip()
    assert "SEED:FIRST_EVENT_ID:EVENTS" in err and "\n" not in err


def test_a_fit_needs_events(tmp_path: Path, capsys):
    assert main(["fit-module-map", "--out", str(tmp_path / "x.npz")]) == 2
    assert "give events files, --simulate" in capsys.readouterr().err
    assert not (tmp_path / "x.npz").exists()
