"""A shipped model's module map: fitted once per machine from its card's record into the
cache, checked against the card's checksum, and named ``--map pretrained:NAME``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from partgnn import resources
from partgnn.cli.main import main
from partgnn.data.h5_files import file_sha256
from partgnn.data.pretrained_maps import CACHE_DIR_ENV, map_path
from partgnn.data.storage import GraphFile

FIT = ["--simulate", "5:0:2", "--pileup", "3", "--triplets"]


@pytest.fixture
def shipped(tmp_path: Path, monkeypatch) -> Path:
    """A pretrained folder with one model, ``tiny``, whose card records a tiny map's fit."""
    folder = tmp_path / "pretrained"
    folder.mkdir()
    shutil.copy(resources.pretrained_dir() / "trackml-pt1.pt", folder / "tiny.pt")
    reference = tmp_path / "reference.npz"
    assert main(["fit-module-map", *FIT, "--out", str(reference)]) == 0
    card = {"name": "tiny", "construction": {
        "method": "module-map", "module_map_sha256": file_sha256(reference),
        "fit_module_map": FIT}}  # fmt: skip
    (folder / "tiny.yaml").write_text(yaml.safe_dump(card))
    monkeypatch.setattr(resources, "pretrained_dir", lambda: folder)
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "cache"))
    return folder


def test_the_map_is_made_once_checked_and_named_by_the_model(shipped, tmp_path, capsys):
    events, graphs = tmp_path / "e.h5", tmp_path / "g.h5"
    assert main(["simulate", "--events", "1", "--pileup", "3", "--seed", "9",
                 "--out", str(events)]) == 0  # fmt: skip
    build = ["build-graphs", str(events), "--method", "module-map", "--map", "pretrained:tiny",
             "--out", str(graphs)]  # fmt: skip
    capsys.readouterr()
    assert main(build) == 2
    err = capsys.readouterr().err.strip()
    assert (
        "pretrained:tiny: its module map is not made on this machine yet: partgnn "
        "pretrained pretrained:tiny --make-map"
        in err
        and "\n" not in err
    )
    assert main(["pretrained", "pretrained:tiny", "--make-map", "--workers", "2"]) == 0
    made = map_path("pretrained:tiny")
    assert made == tmp_path / "cache" / "maps" / "tiny.npz" and made.is_file()
    assert list(made.parent.iterdir()) == [made]  # no partial file left behind
    assert main(build) == 0
    with GraphFile(graphs) as built:
        assert built.attrs["module_map_sha256"] == file_sha256(made)
    # Made again: checked and kept; a file that is not the card's is refused, not replaced.
    assert main(["pretrained", "tiny", "--make-map"]) == 0
    made.write_bytes(b"something else")
    capsys.readouterr()
    assert main(["pretrained", "tiny", "--make-map"]) == 2
    assert "not pretrained:tiny's module map" in capsys.readouterr().err
    assert main([*build[:-1], str(tmp_path / "g2.h5")]) == 2
    assert made.read_bytes() == b"something else"


def test_a_model_without_a_map_says_so(capsys):
    assert main(["pretrained", "trackml-pt1", "--make-map"]) == 2
    err = capsys.readouterr().err.strip()
    assert "pretrained:trackml-pt1: its graphs are not built with a module map" in err
    assert main(["pretrained", "--make-map"]) == 2
    assert "name the model" in capsys.readouterr().err
