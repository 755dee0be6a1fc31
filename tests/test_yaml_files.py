"""Bounded YAML: documents whose aliases expand past the limit, or contain themselves, are
refused before they are built; ordinary YAML (anchors included) loads as yaml.safe_load does."""

from __future__ import annotations

import pytest
import yaml

from partgnn.errors import InputError
from partgnn.train.config.config_file import load_config
from partgnn.yaml_files import MAX_YAML_VALUES, load_yaml


def _laughs(levels: int) -> str:
    """A document of ~10 ** levels leaves in a few hundred bytes (nested aliases)."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, levels + 1):
        refs = ", ".join([f"*a{level - 1}"] * 10)
        lines.append(f"a{level}: &a{level} [{refs}]")
    return "\n".join(lines) + "\n"


def test_ordinary_yaml_and_shared_anchors_load_like_safe_load():
    text = "base: &b {lr: 0.001, steps: 8}\nrun: {<<: *b, steps: 4}\nlist: [*b, *b]\n"
    assert load_yaml(text, where="t") == yaml.safe_load(text)
    assert load_yaml(_laughs(3), where="t") == yaml.safe_load(_laughs(3))  # ~1,111 values
    assert load_yaml("", where="t") is None


def test_an_exponential_alias_document_is_refused_at_once():
    text = _laughs(9)  # ~1.1e9 values from under 1 kB
    assert len(text) < 1000
    with pytest.raises(InputError, match=f"more than {MAX_YAML_VALUES:,} values"):
        load_yaml(text, where="bomb.yaml")  # counted, not built: 1e9 values would not fit


def test_an_alias_that_contains_itself_is_refused():
    with pytest.raises(InputError, match="contains itself"):
        load_yaml("a: &a [1, *a]\n", where="loop.yaml")


def test_a_run_config_with_nested_aliases_is_one_line(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text("model:\n  kwargs:\n" + "".join(f"    {line}\n" for line in
                                                    _laughs(7).splitlines()))  # fmt: skip
    with pytest.raises(InputError, match=r"bomb.yaml: the YAML expands to more than"):
        load_config(path)
    with pytest.raises(InputError, match=r"--set model.kwargs: the YAML expands"):
        load_config(None, ["model.kwargs={" + ", ".join(_laughs(7).splitlines()) + "}"])


def test_a_key_given_twice_is_refused_with_both_lines(tmp_path):
    with pytest.raises(InputError, match=r"t.yaml: key 'lr' given twice \(lines 2 and 4\)"):
        load_yaml("optim:\n  lr: 0.1\n  epochs: 2\n  lr: 0.2\n", where="t.yaml")
    path = tmp_path / "twice.yaml"
    path.write_text("run:\n  seed: 1\nrun:\n  seed: 2\n")
    with pytest.raises(InputError, match=r"twice.yaml: key 'run' given twice \(lines 1 and 3\)"):
        load_config(path)
    # the same key in two mappings, and a merge key, are not duplicates
    assert load_yaml("a: {x: 1}\nb: {x: 2}\nc: {<<: {x: 3}, y: 4}\n", where="t") == {
        "a": {"x": 1}, "b": {"x": 2}, "c": {"x": 3, "y": 4}}  # fmt: skip
