"""``partgnn compare`` through its own argument parser (registered as the CLI registers it)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from partgnn.cli import report_commands
from partgnn.errors import InputError
from tests.metrics.test_report import _final, make_run


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="partgnn")
    report_commands.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_compare_writes_the_report_and_says_where(tmp_path: Path, capsys):
    halo = make_run(
        tmp_path / "halo", mode="halo", world_size=2, final=_final(0.9, 0.8, 0.8, 0.95, 0.2)
    )
    naive = make_run(
        tmp_path / "naive", mode="naive", world_size=2, final=_final(0.8, 0.8, 0.2, 0.95, 0.3)
    )
    out = tmp_path / "cmp"
    args = _parse(["compare", str(halo), str(naive), "--out", str(out), "--names", "H", "N"])
    assert args.run(args) == 0
    assert capsys.readouterr().out.strip() == f"comparison report: {out / 'report.md'}"
    text = (out / "report.md").read_text()
    assert "| H | halo |" in text and "| N | naive |" in text
    assert "loses 75.0% of the boundary true edges" in text


def test_compare_needs_out_and_a_run(tmp_path: Path, capsys):
    with pytest.raises(SystemExit):
        _parse(["compare", str(tmp_path)])
    with pytest.raises(SystemExit):
        _parse(["compare", "--out", str(tmp_path)])
    capsys.readouterr()
    args = _parse(["compare", str(tmp_path / "missing"), "--out", str(tmp_path / "cmp")])
    with pytest.raises(InputError, match="missing: run directory not found"):
        args.run(args)
