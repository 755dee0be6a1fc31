"""A shipped model's module map: shipped beside the model and named ``--map pretrained:NAME``;
refitted from its card's record into the cache on request and compared with the card's map,
bitwise or by content; a refit that is another map is kept, never deleted."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from partgnn import resources
from partgnn.cli.main import main
from partgnn.data.files.h5_files import file_sha256
from partgnn.data.files.storage import GraphFile
from partgnn.data.module_map.map_file import ModuleMap
from partgnn.data.module_map.pretrained_maps import CACHE_DIR_ENV, map_path

FIT = ["--simulate", "5:0:2", "--pileup", "3", "--triplets"]


@pytest.fixture
def shipped(tmp_path: Path, monkeypatch) -> Path:
    """A pretrained folder with one model, ``tiny``, whose card records a tiny map's fit."""
    folder = tmp_path / "pretrained"
    folder.mkdir()
    shutil.copy(resources.pretrained_dir() / "trackml-pt1.pt", folder / "tiny.pt")
    reference = folder / "tiny.map.npz"  # shipped beside the model
    assert main(["fit-module-map", *FIT, "--out", str(reference)]) == 0
    card = {"name": "tiny", "construction": {
        "method": "module-map", "module_map_sha256": file_sha256(reference),
        "fit_module_map": FIT}}  # fmt: skip
    (folder / "tiny.yaml").write_text(yaml.safe_dump(card))
    monkeypatch.setattr(resources, "pretrained_dir", lambda: folder)
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "cache"))
    return folder


def _build(events: Path, graphs: Path) -> list[str]:
    return ["build-graphs", str(events), "--method", "module-map", "--map", "pretrained:tiny",
            "--out", str(graphs)]  # fmt: skip


@pytest.fixture
def events(tmp_path: Path) -> Path:
    path = tmp_path / "e.h5"
    assert main(["simulate", "--events", "1", "--pileup", "3", "--seed", "9",
                 "--out", str(path)]) == 0  # fmt: skip
    return path


def test_the_shipped_map_builds_graphs_without_a_fit(shipped, events, tmp_path, capsys):
    graphs = tmp_path / "g.h5"
    assert main(_build(events, graphs)) == 0
    with GraphFile(graphs) as built:
        assert built.attrs["module_map_sha256"] == file_sha256(shipped / "tiny.map.npz")
    assert not map_path("pretrained:tiny").exists()  # nothing fitted, nothing cached
    # A damaged installation is refused, not used.
    (shipped / "tiny.map.npz").write_bytes(b"damaged")
    capsys.readouterr()
    assert main(_build(events, tmp_path / "g2.h5")) == 2
    assert "the installation is damaged; reinstall partgnn" in capsys.readouterr().err


def test_models_of_one_map_share_its_file(shipped, events, tmp_path, capsys):
    """A second model whose card names the first's map file (``module_map_file``) builds with
    it, no fit; a card naming anything but a map file beside the model is refused."""
    shutil.copy(shipped / "tiny.pt", shipped / "twin.pt")
    card = yaml.safe_load((shipped / "tiny.yaml").read_text())
    card["name"], card["construction"]["module_map_file"] = "twin", "tiny.map.npz"
    (shipped / "twin.yaml").write_text(yaml.safe_dump(card))
    graphs = tmp_path / "g.h5"
    build = _build(events, graphs)
    build[build.index("pretrained:tiny")] = "pretrained:twin"
    assert main(build) == 0
    with GraphFile(graphs) as built:
        assert built.attrs["module_map_sha256"] == file_sha256(shipped / "tiny.map.npz")
    assert not map_path("pretrained:twin").exists()
    card["construction"]["module_map_file"] = "../tiny.map.npz"
    (shipped / "twin.yaml").write_text(yaml.safe_dump(card))
    capsys.readouterr()
    assert main([*build[:-1], str(tmp_path / "g2.h5")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("its card's module_map_file '../tiny.map.npz' is not a NAME.map.npz file "
                        "beside the model") and "\n" not in err  # fmt: skip


def test_a_refit_is_compared_bitwise_and_kept(shipped, events, tmp_path, capsys):
    assert main(["pretrained", "pretrained:tiny", "--make-map", "--workers", "2"]) == 0
    out = capsys.readouterr()
    assert "fit-module-map: simulating 2 events of pile-up 3 on " in out.err
    assert " on 2 worker(s)" in out.err or "this machine's 1 cores" in out.err  # --workers 2
    made = map_path("pretrained:tiny")
    assert f"pretrained:tiny: module map {made}: bitwise the card's map (sha256 " in out.out
    assert list(made.parent.iterdir()) == [made]  # no partial file left behind
    assert main(["pretrained", "tiny", "--make-map"]) == 0  # made again: compared and kept
    # Without a shipped map (a trimmed installation) the refit builds the graphs.
    (shipped / "tiny.map.npz").unlink()
    graphs = tmp_path / "g.h5"
    assert main(_build(events, graphs)) == 0
    with GraphFile(graphs) as built:
        assert built.attrs["module_map_sha256"] == file_sha256(made)


def test_a_refit_differing_in_last_bits_is_the_same_map(shipped, tmp_path, capsys):
    """The shipped map as another CPU's arithmetic might have made it (every window one ulp
    away): the refit here is the same map in substance, said with the largest difference."""
    reference = ModuleMap.load(shipped / "tiny.map.npz")
    nudged = dataclasses.replace(
        reference, low=np.nextafter(reference.low, -np.inf),
        high=np.nextafter(reference.high, np.inf),
    )  # fmt: skip
    nudged.save(shipped / "tiny.map.npz")
    _record_card_sha(shipped)
    assert main(["pretrained", "tiny", "--make-map"]) == 0
    said = capsys.readouterr().out
    assert "the same map in substance: the same module pairs and triplets and counts, " in said
    assert "(relative; tolerance 1e-09) (against the shipped map" in said
    assert map_path("tiny").is_file()


def test_a_refit_that_is_another_map_is_kept_and_refused(shipped, tmp_path, capsys):
    reference = ModuleMap.load(shipped / "tiny.map.npz")
    other = dataclasses.replace(reference, count=reference.count + 1)
    other.save(shipped / "tiny.map.npz")
    _record_card_sha(shipped)
    assert main(["pretrained", "tiny", "--make-map"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    kept = map_path("tiny").with_name("tiny.differs.npz")
    assert err.startswith(f"partgnn: error: {kept}: the map fitted here is not pretrained:tiny's")
    assert "of its doublets behind each pair differ from the reference's" in err
    assert kept.is_file() and ModuleMap.load(kept).count.sum() == reference.count.sum()
    assert "another map: " in kept.with_suffix(".txt").read_text()
    assert not map_path("tiny").exists()


def _record_card_sha(folder: Path) -> None:
    """Writes the shipped map's checksum into the tiny card (as make_pretrained does)."""
    card = yaml.safe_load((folder / "tiny.yaml").read_text())
    card["construction"]["module_map_sha256"] = file_sha256(folder / "tiny.map.npz")
    (folder / "tiny.yaml").write_text(yaml.safe_dump(card))


def test_a_model_without_a_map_says_so(capsys):
    assert main(["pretrained", "trackml-pt1", "--make-map"]) == 2
    err = capsys.readouterr().err.strip()
    assert "pretrained:trackml-pt1: its graphs are not built with a module map" in err
    assert main(["pretrained", "--make-map"]) == 2
    assert "name the model" in capsys.readouterr().err
