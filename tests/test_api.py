"""``import partgnn``: the public entry points, documented, loaded on first use."""

import subprocess
import sys

import pytest

import partgnn


def test_import_partgnn_loads_no_torch():
    code = "import sys, partgnn; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr


def test_all_lists_exactly_the_exports():
    assert set(partgnn.__all__) == {"__version__", *partgnn._EXPORTS}
    assert sorted(dir(partgnn)) == sorted(partgnn.__all__)


@pytest.mark.parametrize("name", sorted(partgnn._EXPORTS))
def test_every_entry_point_resolves_and_is_documented(name):
    value = getattr(partgnn, name)
    assert value.__module__ == partgnn._EXPORTS[name] or name == "InputError"
    assert (value.__doc__ or "").strip(), f"partgnn.{name} has no docstring"


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        partgnn.nope  # noqa: B018
