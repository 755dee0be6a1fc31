"""The options every tool shares (tools/_common.py): an option's former name is read as its name
with a one-line notice; both given is refused; a measured table is recorded with where and how
it was measured, and never from uncommitted code."""

from __future__ import annotations

import json
import runpy
import sys

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


def test_a_table_is_recorded_by_name_with_where_and_how_it_was_measured(
    common, tmp_path, monkeypatch
):
    """record_table replaces the table of its name and keeps the others and the rows; each is
    stamped with the machine, date, commit and command."""
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"title": "t", "headline": "h.", "order": 1, "history": "h",
                                "rows": [{"figure": "kept"}]}))  # fmt: skip
    record = common["record_table"]
    monkeypatch.setitem(record.__globals__, "commit", lambda: "abc1234")
    monkeypatch.setattr(sys, "argv", ["tools/bench_x.py", "--record", str(path), "--fast"])
    for value in (1.0, 2.0):
        record(path, "ops", "Operations", [{"m": "a", "v": value}], row_label="{m}",
               column_label="v", cell="{v}")  # fmt: skip
    record(path, "other", "Other", [{"m": "b", "v": 3.0}], row_label="{m}", column_label="v",
           cell="{v}")  # fmt: skip
    result = json.loads(path.read_text())
    assert [table["name"] for table in result["tables"]] == ["ops", "other"]
    ops = result["tables"][0]
    assert ops["measurements"] == [{"m": "a", "v": 2.0}] and ops["commit"] == "abc1234"
    assert ops["command"].endswith("bench_x.py --fast") and "--record" not in ops["command"]
    assert result["rows"] == [{"figure": "kept"}]
    assert record(None, "ops", "x", [], row_label="", column_label="", cell="") is None


def test_a_tables_command_names_the_thread_count_and_the_cpu_capability_it_ran_with(
    common, tmp_path, monkeypatch
):
    """A figure measured with torch and oneDNN limited to AVX2 reproduces only with the same
    variables: the command line recorded names them (and no other variable)."""
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"title": "t", "headline": "h.", "order": 1, "history": "h"}))
    record = common["record_table"]
    monkeypatch.setitem(record.__globals__, "commit", lambda: "abc1234")
    monkeypatch.setattr(sys, "argv", ["tools/bench_x.py", "--record", str(path)])
    for name, value in (("OMP_NUM_THREADS", "2"), ("ATEN_CPU_CAPABILITY", "avx2"),
                        ("ONEDNN_MAX_CPU_ISA", "AVX2"), ("MKL_NUM_THREADS", "1")):  # fmt: skip
        monkeypatch.setenv(name, value)
    record(path, "ops", "Operations", [{"v": 1}], row_label="a", column_label="v", cell="{v}")
    command = json.loads(path.read_text())["tables"][0]["command"]
    assert command.startswith(
        "OMP_NUM_THREADS=2 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 .venv/bin/python "
    ), command
    assert "MKL_NUM_THREADS" not in command


def test_recording_from_uncommitted_code_is_refused_before_measuring(common, monkeypatch, capsys):
    parser = common["ToolParser"]("a tool", figures="exchange")
    monkeypatch.setitem(parser.parse_args.__globals__, "commit", lambda: "abc1234+changes")
    with pytest.raises(SystemExit):
        parser.parse_args(["--record"])
    assert "--record: the code has uncommitted changes" in capsys.readouterr().err
