"""The docs are a contract: every command README, the user guide and the shipped configs' comments
show parses (launcher options included), README's pipeline runs as written (options for size
aside) and makes the data the shipped configs read, and README's figures are the benchmarks'.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from torch.distributed.run import get_args_parser as torchrun_parser

from partgnn.cli.main import build_parser, main
from partgnn.resources import config_names, resolve_config
from partgnn.train.config.config_file import load_config
from tests.train.conftest import probes_at_test_size, write_config

REPOSITORY = Path(__file__).resolve().parents[1]
README = REPOSITORY / "README.md"
GUIDE = REPOSITORY / "docs" / "USER_GUIDE.md"
BENCHMARKS = REPOSITORY / "docs" / "BENCHMARKS.md"

#: How a documented command line starts.
STARTS = ("partgnn ", "torchrun ", "mpirun ", "srun ", "python -m partgnn ")

#: Placeholders the prose uses for a number or a name, and what stands in for them here.
PLACEHOLDERS = {"P": "2", "N": "2", "F": "full"}


@dataclass(frozen=True)
class Documented:
    """One command line of the docs: where it is, whether it is whole (a code block or a config
    comment) or a fragment of prose (inline code, possibly with ``...``)."""

    where: str
    line: str
    whole: bool


def _code_blocks(text: str) -> list[str]:
    return [
        m.group(2)
        for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)
        if m.group(1) in ("", "bash", "sh", "shell", "console")
    ]


def _command_lines(text: str) -> list[str]:
    """The command lines of a block of shell text: continuations joined, comments dropped."""
    found = []
    for line in text.replace("\\\n", " ").splitlines():
        line = re.split(r"\s+#\s", line.strip())[0].strip()
        if line.startswith(STARTS):
            found.append(line)
    return found


def documented_commands() -> list[Documented]:
    """Every command line of README, the user guide and the shipped configs' comments."""
    found = []
    for path in (README, GUIDE):
        text = path.read_text()
        name = path.relative_to(REPOSITORY).as_posix()
        found += [Documented(name, line, True) for block in _code_blocks(text)
                  for line in _command_lines(block)]  # fmt: skip
        prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
        found += [Documented(name, m.group(1), False) for m in re.finditer(r"`([^`\n]+)`", prose)
                  if m.group(1).startswith(STARTS)]  # fmt: skip
    for name in config_names():
        comments = "\n".join(
            line.lstrip("#").strip()
            for line in resolve_config(name).read_text().splitlines()
            if line.startswith("#")
        )
        found += [Documented(f"configs/{name}.yaml", line, True)
                  for line in _command_lines(comments)]  # fmt: skip
    return found


def _partgnn_arguments(tokens: list[str], where: str) -> list[str]:
    """The arguments of ``partgnn`` in a launcher's command line; torchrun's own options are
    parsed by torchrun's parser."""
    if tokens[0] == "torchrun":
        if "..." in tokens:
            return tokens[tokens.index("partgnn") + 1 :]
        parsed = torchrun_parser().parse_args(tokens[1:])
        assert parsed.module and parsed.training_script == "partgnn", where
        return list(parsed.training_script_args)
    if "partgnn" not in tokens:
        pytest.fail(f"{where}: no partgnn in the command")
    return tokens[tokens.index("partgnn") + 1 :]


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[name]
    raise AssertionError("partgnn has no sub-commands")


def _known_options(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


COMMANDS = documented_commands()


def test_the_docs_show_commands_of_every_kind():
    """The extraction finds what it should (a test that found none would pass for nothing)."""
    wheres = {c.where for c in COMMANDS}
    assert {"README.md", "docs/USER_GUIDE.md", "configs/halo.yaml"} <= wheres
    assert sum(c.line.startswith("torchrun") for c in COMMANDS) >= 10
    assert len(COMMANDS) >= 60


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: f"{c.where}: {c.line}"[:90])
def test_every_documented_command_parses(command: Documented):
    where = f"{command.where}: {command.line}"
    line = command.line.split(" > ")[0]  # a shell redirection
    tokens = [PLACEHOLDERS.get(t, t) for t in shlex.split(line)]
    if tokens[:3] == ["python", "-m", "partgnn"]:
        tokens = ["partgnn", *tokens[3:]]
    try:
        arguments = _partgnn_arguments(tokens, where)
    except SystemExit:
        pytest.fail(f"{where}: the launcher's options do not parse")
    parser = build_parser()
    fragment = not command.whole or "..." in tokens or any(t.startswith("[") for t in tokens)
    if fragment:
        # Prose: the sub-command exists and every option it names is one of its options.
        arguments = [t for t in arguments if t != "..."]
        options = [t.split("=")[0] for t in arguments if t.startswith("--")]
        positional = [t for t in arguments if not t.startswith("-")]
        if not positional:
            return
        known = _known_options(parser) | _known_options(_subparser(parser, positional[0]))
        unknown = [o for o in options if o.strip("[]").split("|")[0] not in known]
        assert not unknown, f"{where}: unknown options {unknown}"
        return
    try:
        args = parser.parse_args(arguments)
    except SystemExit:
        pytest.fail(f"{where}: does not parse")
    if getattr(args, "config", None) in config_names():
        load_config(args.config, args.set)  # every --set names a field and a good value


def _pipeline_block() -> list[str]:
    blocks = [b for b in _code_blocks(README.read_text()) if "partgnn simulate" in b]
    assert len(blocks) == 1, "README has one pipeline block"
    return _command_lines(blocks[0])


#: README's event count and pile-up, replaced by ones that run in seconds. The data names, the
#: commands and every other option are README's.
SIZE = {"--events": "8", "--pileup": "3"}


@pytest.mark.slow
def test_readmes_pipeline_runs_as_written_and_feeds_the_configs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    ran = []
    for line in _pipeline_block():
        tokens = shlex.split(line)
        if "path/to/trackml/train_1" in tokens:
            continue  # the alternative to simulate, for the user's own TrackML files
        for i, token in enumerate(tokens[:-1]):
            if token in SIZE:
                tokens[i + 1] = SIZE[token]
        assert main(tokens[1:]) == 0, f"{line}: {capsys.readouterr().err[-2000:]}"
        ran.append(tokens[1])
    assert ran == ["simulate", "build-graphs", "info", "partition", "inspect"]
    assert Path("partition.png").stat().st_size > 0
    # The shipped configs read what the pipeline made, under the same names.
    for name in ("full", "halo", "naive", "ddp"):
        data = load_config(name).data
        for path in filter(None, (data.graphs, data.shards, data.boundary_shards)):
            assert Path(path).exists(), f"configs/{name}.yaml reads {path}; README makes none"
    capsys.readouterr()
    assert main(["train", "--config", "full", "--set", "optim.max_steps=1",
                 "--set", "run.progress=false"]) == 0  # fmt: skip
    # README's plan line, as written (the model's and the probes' sizes aside: the planner's
    # take 30 s at H = 64): from a shards config, the ranks for 40 GB.
    probes_at_test_size(monkeypatch)
    small = ["--set", "model.hidden=8", "--set", "model.steps=1"]
    assert main(["plan", "--config", "halo", "--memory-gb", "40", *small]) == 0
    assert "needs 1 rank(s) of 40 GB" in capsys.readouterr().out


def test_plan_memory_gb_without_the_source_graphs_is_one_line(tmp_path, capsys):
    shards = tmp_path / "shards"
    graphs = tmp_path / "graphs.h5"
    assert (
        main(["simulate", "--events", "2", "--pileup", "2", "--out", str(tmp_path / "e.h5")]) == 0
    )
    assert main(["build-graphs", str(tmp_path / "e.h5"), "--out", str(graphs)]) == 0
    assert main(["partition", str(graphs), "--parts", "2", "--method", "phi", "--out",
                 str(shards)]) == 0  # fmt: skip
    graphs.rename(tmp_path / "moved.h5")
    config = write_config(tmp_path / "halo.yaml", mode="halo", data={"shards": str(shards)})
    capsys.readouterr()
    assert main(["plan", "--config", str(config), "--memory-gb", "40"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{graphs}, which is not found: set data.graphs" in err[0], err


def test_readmes_figures_are_the_benchmarks():
    """Every percentage, GB and edge-count figure README's prose quotes is in
    docs/BENCHMARKS.md (code blocks hold arguments, not figures)."""
    readme = re.sub(r"^```.*?^```", "", README.read_text(), flags=re.S | re.M)
    benchmarks = BENCHMARKS.read_text()
    figures = re.findall(r"\d[\d.,-]* (?:%|GB)|\d[\d.]*M-edge|\d+x fewer", readme)
    assert len(figures) >= 8
    for figure in figures:
        quoted = figure.replace("-edge", "").replace("x fewer", "x")
        assert quoted in benchmarks, f"README quotes {figure!r}, which BENCHMARKS.md does not hold"


def _figures_page(monkeypatch):
    """tools/figures_page.py as a module (it imports tools/_common.py beside it)."""
    monkeypatch.syspath_prepend(str(REPOSITORY / "tools"))
    import figures_page

    return figures_page


def test_the_benchmarks_page_is_the_one_its_result_files_give(monkeypatch):
    """docs/BENCHMARKS.md is generated from docs/results/figures/: edited by hand, or a result
    file changed without regenerating the page, and this fails."""
    figures_page = _figures_page(monkeypatch)
    results = figures_page.load_results()
    assert len(results) >= 10
    page = figures_page.render(results, figures_page.OPENING.read_text())
    assert BENCHMARKS.read_text() == page, "run .venv/bin/python tools/figures_page.py"


def test_every_capability_links_a_history_page_and_every_history_page_is_linked(monkeypatch):
    figures_page = _figures_page(monkeypatch)
    linked = {result["history"] for result in figures_page.load_results()}
    for history in linked:
        assert (REPOSITORY / "docs" / history).is_file(), history
    pages = {f"history/{path.name}" for path in (REPOSITORY / "docs" / "history").glob("*.md")}
    assert pages - linked <= {"history/gpu.md"}, pages - linked  # gpu.md: from the opening
    assert "docs/history/gpu.md" in BENCHMARKS.read_text()


def test_a_result_file_without_a_field_is_named_with_the_field(monkeypatch, tmp_path):
    figures_page = _figures_page(monkeypatch)
    (tmp_path / "x.json").write_text(
        '{"title": "t", "headline": "h.", "order": 1, "history": "h", "rows": [{"figure": "f", '
        '"value": "v"}]}'
    )
    with pytest.raises(ValueError, match=r"x.json: row 0 lacks machine, date, commit, command"):
        figures_page.load_results(tmp_path)
    (tmp_path / "x.json").write_text('{"title": "t", "order": 1, "history": "h", "rows": []}')
    with pytest.raises(ValueError, match=r"x.json: no field 'headline'"):
        figures_page.load_results(tmp_path)


TABLE = {
    "name": "operations", "caption": "Operations per step", "row_label": "recompute {recompute}",
    "column_label": "{precision}", "cell": "{operations:,} ({ratio:.2f}x)",
    "machine": "2 cores", "date": "2026-12-07", "commit": "abc1234", "command": "tool --x",
    "measurements": [
        {"recompute": "on", "precision": "float32", "operations": 1814, "ratio": 1.333},
        {"recompute": "on", "precision": "bf16", "operations": 982, "ratio": 1.34},
        {"recompute": "off", "precision": "float32", "operations": 609, "ratio": 1.0},
    ],
}  # fmt: skip


def test_a_table_of_measurements_is_pivoted_with_its_caption_and_command(monkeypatch, tmp_path):
    """Settings as rows and columns, each cell a measurement's numbers; machine and commit in
    the caption; the command once; a missing combination an empty cell."""
    figures_page = _figures_page(monkeypatch)
    result = {"title": "Launches", "headline": "Few launches.", "order": 1, "history": "h.md",
              "tables": [TABLE]}  # fmt: skip
    (tmp_path / "launches.json").write_text(json.dumps(result))
    page = figures_page.render(figures_page.load_results(tmp_path), "# Figures\n")
    assert "**Few launches.**" in page and "*Operations per step*" in page
    assert "|  | float32 | bf16 |" in page
    assert "| recompute on | 1,814 (1.33x) | 982 (1.34x) |" in page
    assert "| recompute off | 609 (1.00x) |  |" in page
    assert "Measured on 2 cores, commit abc1234 (2026-12-07)." in page
    assert page.count("    tool --x") == 1


def test_tables_of_one_run_share_one_caption_stamp_and_reproduce_block(monkeypatch, tmp_path):
    figures_page = _figures_page(monkeypatch)
    second = {**TABLE, "name": "times", "caption": "Step times"}
    result = {"title": "t", "headline": "h.", "order": 1, "history": "h",
              "tables": [TABLE, second]}  # fmt: skip
    (tmp_path / "x.json").write_text(json.dumps(result))
    page = figures_page.render(figures_page.load_results(tmp_path), "# Figures\n")
    assert page.count("    tool --x") == 1 and page.count("Measured on 2 cores") == 1
    assert page.index("*Step times*") < page.index("Measured on 2 cores")


def test_rows_of_another_simulation_say_so_in_the_caption_or_where_mixed_each(
    monkeypatch, tmp_path
):
    figures_page = _figures_page(monkeypatch)
    stamp = {"machine": "m", "date": "2026-11-25", "commit": "abc1234", "command": "tool"}
    old = {**stamp, "figure": "old", "value": "1", "simulation": "ideal-detector"}
    new = {**stamp, "figure": "new", "value": "2"}
    said = "events of the ideal-detector simulation (the default before 2026-12-02)"
    for rows, caption in (([old], True), ([old, new], False), ([new], False)):
        result = {"title": "t", "headline": "h.", "order": 1, "history": "h", "rows": rows}
        (tmp_path / "x.json").write_text(json.dumps(result))
        page = figures_page.render(figures_page.load_results(tmp_path), "# Figures\n")
        assert (f"(2026-11-25); {said}." in page) == caption
        assert (f"| old; {said} | 1 |" in page) == (len(rows) == 2)
        assert "today's" not in page


def test_a_measurement_that_does_not_fit_its_table_is_named(monkeypatch, tmp_path):
    figures_page = _figures_page(monkeypatch)
    table = {**TABLE, "measurements": [{"recompute": "on", "precision": "bf16"}]}
    result = {"title": "t", "headline": "h.", "order": 1, "history": "h", "tables": [table]}
    (tmp_path / "x.json").write_text(json.dumps(result))
    with pytest.raises(ValueError, match=r"x.json: table 'operations': a measurement does not"):
        figures_page.load_results(tmp_path)
