"""docs/ARCHITECTURE.md stays true where a test can tell: its layer table lists the layers of
tests/test_layers.py, in their order, and names every module of each package in that package's
row; each module it names in a row is one of that package."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_layers import LAYERS, PACKAGE

ARCHITECTURE = Path(__file__).resolve().parents[1] / "docs" / "ARCHITECTURE.md"

#: A row of the layer table: ``| N | packages | what they hold |``.
ROW = re.compile(r"^\| (\d+) \| (.*?) \| (.*) \|$")


def layer_rows() -> dict[int, tuple[str, str]]:
    """The layer table's rows: layer number -> (its packages cell, its description)."""
    rows = {}
    for line in ARCHITECTURE.read_text().splitlines():
        match = ROW.match(line)
        if match:
            rows[int(match.group(1))] = (match.group(2), match.group(3))
    return rows


def folder_packages(cell: str) -> list[str]:
    """The packages a row names as folders (`` `train/` ``)."""
    return re.findall(r"`([a-z_]+)/`", cell)


def modules_of(package: str) -> set[str]:
    """The module names of ``partgnn/<package>/``, sub-packages' modules included."""
    folder = PACKAGE / package
    return {path.stem for path in folder.rglob("*.py") if path.stem != "__init__"}


def named(module: str, description: str) -> bool:
    """Whether ``description`` names ``module`` in backticks (alone, as a path's last part, or
    before an attribute: `` `halo_plan` ``, `` `report/runs` ``, `` `modes.ModeFacts` ``)."""
    return re.search(rf"`(?:[\w/]+/)?{module}(?:\.[\w.()]+)?`", description) is not None


def test_every_module_is_named_in_its_layer_row():
    unnamed = {}
    for _, (cell, description) in layer_rows().items():
        for package in folder_packages(cell):
            missing = sorted(m for m in modules_of(package) if not named(m, description))
            if missing:
                unnamed[package] = missing
    assert unnamed == {}, unnamed


def test_the_table_lists_the_enforced_layers_in_order():
    rows = layer_rows()
    enforced = [
        {prefix.removeprefix("partgnn.").split(".")[0] for prefix in layer} for layer in LAYERS
    ]
    for number, (cell, _) in rows.items():
        for package in folder_packages(cell):
            layer = next(i for i, names in enumerate(enforced) if package in names)
            assert layer == number, (package, number, layer)


def test_the_check_finds_an_unnamed_module():
    assert named("halo_plan", "plans (`halo_plan`: what each rank holds)")
    assert named("runs", "the report (`report/runs`)")
    assert named("modes", "its facts (`modes.ModeFacts`)")
    assert not named("halo_plan", "halo plans, what each rank holds")


#: The most lines a module of the package may have: past it, a module holds more than one job.
MAX_MODULE_LINES = 400


def long_modules(package: Path) -> dict[str, int]:
    """The package's modules over :data:`MAX_MODULE_LINES` lines, with their lengths."""
    lengths = {
        str(path.relative_to(package.parent)): len(path.read_text().splitlines())
        for path in package.rglob("*.py")
    }
    return {name: n for name, n in lengths.items() if n > MAX_MODULE_LINES}


def test_no_module_is_over_400_lines():
    assert long_modules(PACKAGE) == {}


def test_the_check_finds_a_long_module(tmp_path):
    package = tmp_path / "partgnn"
    package.mkdir()
    (package / "short.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    (package / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert long_modules(package) == {"partgnn/long.py": MAX_MODULE_LINES + 1}
