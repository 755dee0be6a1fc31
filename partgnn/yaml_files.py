"""YAML read with a bound, and without silent choices: aliases that expand a small file into a
huge document are refused, and so is a mapping that gives one key twice.

YAML aliases (``&a`` ... ``*a``) share one node; nested, they make a document of a few hundred
bytes expand exponentially once it is copied or written out (a "billion laughs" config).
:func:`load_yaml` counts the values the document holds *with aliases expanded* (in time linear
in the file, shared nodes counted once each) before building it, and refuses more than
:data:`MAX_YAML_VALUES`, or an alias that contains itself. Every YAML partgnn reads (run
configs, ``--set`` values, detector geometries, run reports) goes through it. A key given twice
in one mapping (PyYAML would silently keep the last) is refused with its line numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from partgnn.errors import InputError, first_line

#: Most values (scalars, lists and mappings, aliases expanded) one YAML document may hold:
#: partgnn's configs hold about a hundred.
MAX_YAML_VALUES = 100_000


def read_yaml_file(path: Path, *, where: str) -> Any:
    """:func:`load_yaml` of a file, every failure one line naming ``where``.

    Raises:
        InputError: No such file, unreadable, not valid YAML (with its line), or refused by
            :func:`load_yaml`.
    """
    try:
        return load_yaml(path.read_text(), where=where)
    except FileNotFoundError:
        raise InputError(f"{where}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{where}: unreadable ({first_line(err)})") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or first_line(err)
        raise InputError(f"{where}: not valid YAML{line} ({problem})") from None


def load_yaml(text: str, *, where: str) -> Any:
    """``yaml.safe_load(text)``, refused if the expanded document is too large.

    Raises:
        InputError: The document expands past :data:`MAX_YAML_VALUES` values, an alias
            contains itself, or a mapping gives a key twice (one line naming ``where``).
        yaml.YAMLError: Not valid YAML (the caller words it).
    """
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        size = _expanded_size(root, where=where)
        if size > MAX_YAML_VALUES:
            raise InputError(
                f"{where}: the YAML expands to more than {MAX_YAML_VALUES:,} values through "
                "its aliases (&/*); refused"
            )
        _refuse_duplicate_keys(root, where=where)
        return loader.construct_document(root)
    finally:
        loader.dispose()


def _expanded_size(root: yaml.Node, *, where: str) -> int:
    """Values under ``root`` with aliases expanded (capped just above the limit)."""
    size: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        children = _children(node)
        if children_done:
            open_nodes.discard(key)
            total = 1 + sum(size[id(child)] for child in children)
            size[key] = min(total, MAX_YAML_VALUES + 1)
            continue
        if key in size:
            continue
        if key in open_nodes:
            raise InputError(f"{where}: a YAML alias contains itself; refused")
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in children if id(child) not in size)
    return size[id(root)]


def _refuse_duplicate_keys(root: yaml.Node, *, where: str) -> None:
    """Raises InputError at the first mapping that gives a scalar key twice."""
    seen_nodes: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first_line_of: dict[str, int] = {}
            for key, _ in node.value:
                if not isinstance(key, yaml.ScalarNode) or key.value == "<<":
                    continue
                line = key.start_mark.line + 1
                if key.value in first_line_of:
                    raise InputError(
                        f"{where}: key {key.value!r} given twice (lines "
                        f"{first_line_of[key.value]} and {line}); keep one"
                    )
                first_line_of[key.value] = line
        stack.extend(_children(node))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []
