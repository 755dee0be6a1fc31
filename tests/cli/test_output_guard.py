"""No command writes over its inputs: ``--out`` equal to (or a link to) an input, or an output
folder holding one, is refused before any work with one line and exit 2; the input is intact."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from partgnn.cli.main import main


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def data(tiny_pipeline: Path) -> Path:
    return tiny_pipeline


@pytest.mark.parametrize(
    "command",
    [
        ["build-graphs", "{events}", "--out", "{events}"],
        ["build-graphs", "{events}", "--out", "{link}"],
        ["infer", "--checkpoint", "pretrained:trackml-pt1", "--graphs", "{graphs}", "--out",
         "{graphs}", "--device", "cpu"],
        ["evaluate", "{graphs}", "--graphs", "{graphs}", "--out", "{graphs}"],
        ["fit-module-map", "{events}", "--out", "{hardlink}"],
        ["partition", "{graphs}", "--parts", "2", "--out", "{folder}"],
    ],
    ids=["same path", "symlink", "infer", "evaluate", "hard link", "folder holds input"],
)  # fmt: skip
def test_an_output_over_an_input_is_refused_before_any_work(
    data: Path, tmp_path: Path, command: list[str], capsys
):
    link, hardlink = tmp_path / "link.h5", tmp_path / "hard.h5"
    link.symlink_to(data / "events.h5")
    os.link(data / "events.h5", hardlink)
    names = {"events": data / "events.h5", "graphs": data / "graphs.h5", "link": link,
             "hardlink": hardlink, "folder": data}  # fmt: skip
    before = {path: _digest(path) for path in (data / "events.h5", data / "graphs.h5")}
    listing = sorted(p.name for p in data.iterdir())
    argv = [part.format(**names) for part in command]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("partgnn: error: "), err
    assert "choose another --out" in err
    assert {path: _digest(path) for path in before} == before
    assert sorted(p.name for p in data.iterdir()) == listing  # nothing written beside them


def test_a_different_output_beside_the_inputs_still_works(data: Path, tmp_path: Path):
    out = tmp_path / "graphs-again.h5"
    assert main(["build-graphs", str(data / "events.h5"), "--pt-min", "1.0", "--out",
                 str(out)]) == 0  # fmt: skip
    assert out.is_file()
