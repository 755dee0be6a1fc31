"""The graph construction a model expects, against the one a graphs file records: scoring
graphs built another way says so in one line."""

from __future__ import annotations

from pathlib import Path

import torch

from partgnn.cli.main import main
from partgnn.data.files.h5_files import file_sha256
from partgnn.data.files.storage import GraphFile
from partgnn.data.graphs.graph_construction import (
    construction_mismatch,
    describe,
    graph_construction,
)
from partgnn.train.run_directory.checkpoints import load_checkpoint
from partgnn.train.run_directory.saved_model import SavedModel

SHA = "ab" * 32


def test_only_what_the_model_names_is_compared():
    found = {"method": "module-map", "module_map_sha256": SHA, "pt_min": 0.0}
    assert construction_mismatch(None, found) is None
    assert construction_mismatch({"method": "module-map", "module_map_sha256": SHA}, found) is None
    said = construction_mismatch({"method": "module-map", "module_map_sha256": "cd" * 32}, found)
    assert said == (
        "built by module-map (map sha256 abababababab...), the model expects module-map "
        "(map sha256 cdcdcdcdcdcd...)"
    )
    geometric = {"method": "geometric", "module_map_sha256": None, "pt_min": 0.0}
    assert "built by geometric (every hit), the model expects geometric (pT >= 1 GeV)" in (
        construction_mismatch({"method": "geometric", "pt_min": 1.0}, geometric)
    )
    assert describe({"method": "module-map"}) == "module-map (map not recorded)"


def test_graphs_record_their_map_and_scoring_other_graphs_warns(tmp_path: Path, capsys):
    events, geometric, mapped = (tmp_path / n for n in ("e.h5", "g.h5", "m.h5"))
    module_map = tmp_path / "map.npz"
    assert main(["simulate", "--events", "1", "--pileup", "3", "--out", str(events)]) == 0
    assert main(["build-graphs", str(events), "--out", str(geometric)]) == 0
    assert main(["fit-module-map", str(events), "--out", str(module_map)]) == 0
    assert main(["build-graphs", str(events), "--method", "module-map", "--map",
                 str(module_map), "--out", str(mapped)]) == 0  # fmt: skip
    with GraphFile(mapped) as graphs:
        expected = graph_construction(graphs.attrs)
    assert expected["method"] == "module-map"
    assert expected["module_map_sha256"] == file_sha256(module_map)
    # A checkpoint naming the module map's construction (as a shipped model does).
    state = dict(load_checkpoint("pretrained:trackml-pt1"))
    state["construction"] = {k: expected[k] for k in ("method", "module_map_sha256")}
    checkpoint = tmp_path / "model.pt"
    torch.save(state, checkpoint)
    capsys.readouterr()
    for graphs, warned in ((mapped, False), (geometric, True)):
        scores = tmp_path / f"s-{graphs.stem}.h5"
        assert main(["infer", "--checkpoint", str(checkpoint), "--graphs", str(graphs),
                     "--out", str(scores), "--device", "cpu"]) == 0  # fmt: skip
        err = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
        if warned:
            assert (
                len(err) == 1
                and f"{graphs}: built by geometric (every hit), the model "
                "expects module-map (map sha256 "
                in err[0]
            )
        else:
            assert err == []
    # The shipped pT > 1 GeV model names its construction too: every-hit graphs warn.
    assert SavedModel.read("pretrained:trackml-pt1").construction == {
        "method": "geometric", "pt_min": 1.0}  # fmt: skip
    assert main(["infer", "--checkpoint", "pretrained:trackml-pt1", "--graphs", str(geometric),
                 "--out", str(tmp_path / "pt1.h5"), "--device", "cpu"]) == 0  # fmt: skip
    err = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(err) == 1 and (
        "built by geometric (every hit), the model expects geometric (pT >= 1 GeV) (partgnn "
        "pretrained pretrained:trackml-pt1 shows how to build them)" in err[0]
    )
