"""The options every tool shares (tools/_common.py): an option's former name is read as its name
with a one-line notice; both given is refused."""

from __future__ import annotations

import runpy

import pytest

from tests.distributed.launch import REPOSITORY


@pytest.fixture(scope="module")
def common() -> dict:
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(REPOSITORY / "tools"))
        return runpy.run_path(str(REPOSITORY / "tools" / "_common.py"), run_name="tool")


def _parser(common: dict):
    parser = common["ToolParser"]("a tool")
    parser.add_argument("--recompute", nargs="+", default=["off"])
    parser.renamed("--checkpointing", "--recompute")
    return parser


def test_a_former_option_name_is_read_as_its_name_with_a_notice(common, capsys):
    args = _parser(common).parse_args(["--checkpointing", "on", "off"])
    assert args.recompute == ["on", "off"]
    assert capsys.readouterr().err.count("--checkpointing is now called --recompute") == 1
    assert _parser(common).parse_args(["--checkpointing=on"]).recompute == ["on"]
    assert "--checkpointing is now called --recompute" in capsys.readouterr().err
    assert _parser(common).parse_args(["--recompute", "on"]).recompute == ["on"]
    assert capsys.readouterr().err == ""


def test_a_former_and_a_new_name_together_are_refused(common, capsys):
    with pytest.raises(SystemExit) as stopped:
        _parser(common).parse_args(["--checkpointing", "on", "--recompute", "off"])
    assert stopped.value.code == 2
    assert "--checkpointing is the former name of --recompute: give one" in capsys.readouterr().err
