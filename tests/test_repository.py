"""The repository stands alone: nothing in its code, docs, configs or scripts points outside it
(the workplace's folders beside the checkout) or at a path of one machine."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: A folder beside the checkout, or an absolute path of one machine's user or scratch folders
#: (the patterns are put together here so that this file does not match them).
OUTSIDE = re.compile(
    r"\.\./"
    + "shared"
    + r"|(?:^|[\s\"'`=(:])/(?:"
    + "|".join(("work", "home", "root", "Users", "scratch"))
    + r")/"
)

#: Files that are data, not text a person or a program follows.
BINARY_SUFFIXES = {".pt", ".npz", ".png", ".gz", ".h5", ".pdf"}


def tracked_text_files() -> list[Path]:
    """The repository's tracked files that are text (its code, docs, configs, scripts)."""
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if listed.returncode:
        pytest.skip("not a git checkout")
    return [
        ROOT / name
        for name in listed.stdout.splitlines()
        if Path(name).suffix not in BINARY_SUFFIXES and (ROOT / name).is_file()
    ]


def places_outside(path: Path) -> list[str]:
    """``path:line: text`` of each line of ``path`` that points outside the repository."""
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        return []
    return [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}"
        for number, line in enumerate(text.splitlines(), start=1)
        if OUTSIDE.search(line)
    ]


def test_nothing_points_outside_the_repository():
    found = [place for path in tracked_text_files() for place in places_outside(path)]
    assert found == [], "\n".join(found)


def test_the_check_finds_what_it_looks_for(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    lines = [
        "see ../" + "shared/DESIGN.md",
        "cd /" + "work/main/data",
        "python tools/x.py --out /tmp/ok --graphs data/graphs.h5",  # not one machine's
        'PY="/' + 'home/me/.venv/bin/python"',
    ]
    (tmp_path / "notes.md").write_text("\n".join(lines))
    assert [place.split(":")[1] for place in places_outside(tmp_path / "notes.md")] == [
        "1",
        "2",
        "4",
    ]


def test_the_real_sample_is_in_the_repository_with_its_provenance():
    sample = ROOT / "tests" / "fixtures" / "trackml-sample"
    assert (sample / "PROVENANCE.md").is_file()
    assert sorted(p.name for p in sample.glob("*.csv.gz")) == [
        "detectors.csv.gz",
        *(f"event000000001-{part}.csv.gz" for part in ("cells", "hits", "particles", "truth")),
    ]
