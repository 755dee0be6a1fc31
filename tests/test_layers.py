"""The package's layers (docs/ARCHITECTURE.md): no module imports a later layer, and no modules
import each other in a cycle.

Every import statement counts: at module level, inside functions, and under ``TYPE_CHECKING``
(a lazy import still ties the two modules together; a type-only one still tells a reader
that one layer knows the other).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.sparse import coo_array
from scipy.sparse.csgraph import connected_components

PACKAGE = Path(__file__).resolve().parents[1] / "partgnn"

#: Each layer's modules (by prefix), first to last: a module may import its own layer and the
#: ones before it. The foundation (errors, version, resources, process memory, bounded YAML)
#: belongs to no stage; the stages follow the pipeline; the entry points come last.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("partgnn.errors", "partgnn.version"),
    (
        "partgnn.resources",
        "partgnn.memory",
        "partgnn.yaml_files",
        "partgnn.json_files",
        "partgnn.worker_pool",
    ),
    ("partgnn.data",),
    ("partgnn.partition",),
    ("partgnn.distributed",),
    ("partgnn.models",),
    ("partgnn.metrics",),
    ("partgnn.train",),
    ("partgnn.export",),
    ("partgnn.api", "partgnn.workflows"),
    ("partgnn.cli",),
    ("partgnn.demo", "partgnn.__main__"),
    ("partgnn",),  # the package's own __init__: the lazy public names
)


@dataclass(frozen=True)
class Import:
    """``importer`` imports ``imported`` at ``line``."""

    importer: str
    imported: str
    line: int


def module_name(path: Path, root: Path) -> str:
    """``partgnn.models.build`` for ``<root>/partgnn/models/build.py`` (packages by their
    ``__init__``)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_imports(package: Path) -> list[Import]:
    """Every import of one of ``package``'s modules by another, anywhere in its files."""
    root = package.parent
    modules = {module_name(path, root): path for path in package.rglob("*.py")}
    found = []
    for importer, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = importer.split(".")
                    parent = parent if is_package else parent[:-1]
                    parent = parent[: len(parent) - node.level + 1]
                    base = ".".join([*parent, *([base] if base else [])])
                # ``from a import b`` imports the module ``a.b`` when there is one, else ``a``.
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            else:
                continue
            found += [
                Import(importer, target, node.lineno)
                for target in targets
                if target in modules and target != importer
            ]
    return found


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of the longest prefix naming ``module``."""
    matches = [
        (len(prefix), index)
        for index, prefixes in enumerate(LAYERS)
        for prefix in prefixes
        if module == prefix or module.startswith(prefix + ".")
    ]
    if not matches:
        raise AssertionError(f"{module} is in no layer of tests/test_layers.py")
    return max(matches)[1]


def later_layer_imports(imports: list[Import]) -> list[str]:
    """The imports of a later layer, one line each."""
    return [
        f"{i.importer}:{i.line} imports {i.imported} (a later layer)"
        for i in imports
        if layer_of(i.imported) > layer_of(i.importer)
    ]


def import_cycles(imports: list[Import]) -> list[list[str]]:
    """Groups of modules that import each other, directly or through others (strongly
    connected components of more than one module)."""
    names = sorted({i.importer for i in imports} | {i.imported for i in imports})
    index = {name: k for k, name in enumerate(names)}
    rows = np.array([index[i.importer] for i in imports], dtype=np.int64)
    cols = np.array([index[i.imported] for i in imports], dtype=np.int64)
    graph = coo_array((np.ones(len(imports)), (rows, cols)), shape=(len(names),) * 2)
    _, labels = connected_components(graph, directed=True, connection="strong")
    groups = [[names[k] for k in np.flatnonzero(labels == label)] for label in np.unique(labels)]
    return [group for group in groups if len(group) > 1]


def test_no_module_imports_a_later_layer():
    assert later_layer_imports(package_imports(PACKAGE)) == []


def test_no_modules_import_each_other_in_a_cycle():
    assert import_cycles(package_imports(PACKAGE)) == []


def test_every_module_is_in_a_layer():
    for path in PACKAGE.rglob("*.py"):
        layer_of(module_name(path, PACKAGE.parent))


def test_the_checks_find_a_later_layer_import_and_a_cycle(tmp_path):
    package = tmp_path / "partgnn"
    for folder in ("data", "models", "train"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "data" / "storage.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from partgnn.train.config import TrainConfig\n"
    )
    (package / "models" / "a.py").write_text("def f():\n    from . import b\n")
    (package / "models" / "b.py").write_text("from partgnn.models.a import f\n")
    (package / "train" / "config.py").write_text("import partgnn.data.storage\n")
    imports = package_imports(package)
    assert later_layer_imports(imports) == [
        "partgnn.data.storage:3 imports partgnn.train.config (a later layer)"
    ]
    assert import_cycles(imports) == [
        ["partgnn.data.storage", "partgnn.train.config"],
        ["partgnn.models.a", "partgnn.models.b"],
    ]
