"""Writes docs/BENCHMARKS.md, the current-figures page, from the result files the tools write.

Each capability has one result file, ``docs/results/figures/<name>.json``: a title, a headline
(one sentence: what the figures say), the page of docs/history/ that tells how they came about,
an optional note, and its figures, in either of two forms:

- ``tables``: measurements (each a mapping of parameters and numbers) that one run of a tool
  made, shown as one pivoted table: rows and columns are settings (``row_label`` and
  ``column_label`` format a measurement's parameters), each cell a measurement's numbers
  (``cell`` formats them); with the run's machine, date, commit and command;
- ``rows``: one figure per row, its value in words, each with its machine, date, commit and
  command (the form of the figures recorded before tables).

Tools write theirs with ``--record`` (``tools/_common.py``: ``record_table`` and
``record_figures``); this script turns the files into one section per capability, in the files'
``order``: the headline, the tables (rows that share a command form one table), each captioned
with the machine and commit it was measured on and followed by the command that reproduces it.
The page's opening is ``docs/results/page_opening.md``.

    .venv/bin/python tools/figures_page.py            # rewrite docs/BENCHMARKS.md
    .venv/bin/python tools/figures_page.py --check    # exit 1 when the page is not current
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from _common import FIGURES_DIR, REPOSITORY, ToolParser

PAGE = REPOSITORY / "docs" / "BENCHMARKS.md"
OPENING = REPOSITORY / "docs" / "results" / "page_opening.md"
#: What every row of a ``rows`` result holds.
COLUMNS = ("figure", "value", "machine", "date", "commit", "command")
#: What every table of a ``tables`` result holds.
TABLE_FIELDS = ("name", "caption", "row_label", "column_label", "cell", "measurements",
                "machine", "date", "commit", "command")  # fmt: skip
#: What every result file holds.
RESULT_FIELDS = ("title", "headline", "order", "history")
#: The day partgnn's realistic simulation (module planes, measured field, secondaries) became
#: the default; rows measured on the ideal-detector simulation of before say so
#: (``"simulation": "ideal-detector"``).
REALISTIC_SINCE = "2026-12-02"


def load_results(folder: Path = FIGURES_DIR) -> list[dict]:
    """The result files of ``folder``, in their ``order``.

    Raises:
        ValueError: A file lacks a field the page needs (naming the file and the field), or a
            table's cell names a number its measurements lack.
    """
    results = []
    for path in sorted(folder.glob("*.json")):
        result = json.loads(path.read_text())
        for field in RESULT_FIELDS:
            if field not in result:
                raise ValueError(f"{path}: no field {field!r}")
        if not result.get("rows") and not result.get("tables"):
            raise ValueError(f"{path}: no rows and no tables")
        for index, row in enumerate(result.get("rows", [])):
            missing = [column for column in COLUMNS if not row.get(column)]
            if missing:
                raise ValueError(f"{path}: row {index} lacks {', '.join(missing)}")
        for table in result.get("tables", []):
            missing = [field for field in TABLE_FIELDS if not table.get(field)]
            if missing:
                raise ValueError(f"{path}: table {table.get('name')!r} lacks {', '.join(missing)}")
            for measurement in table["measurements"]:
                try:
                    _formatted(table, measurement)
                except (KeyError, ValueError) as error:
                    raise ValueError(
                        f"{path}: table {table['name']!r}: a measurement does not fit its labels "
                        f"and cell ({error})"
                    ) from None
        results.append({**result, "name": path.stem})
    return sorted(results, key=lambda result: (result["order"], result["name"]))


def render(results: list[dict], opening: str) -> str:
    """The page's markdown: the opening, an index, then one section per capability."""
    lines = [opening.rstrip(), "", "## Capabilities", ""]
    lines += [f"- [{result['title']}](#{_anchor(result['title'])})" for result in results]
    for result in results:
        lines += ["", f"## {result['title']}", "", f"**{result['headline']}**", ""]
        if result.get("note"):
            lines += [result["note"], ""]
        tables = result.get("tables", [])
        for index, table in enumerate(tables):
            following = tables[index + 1] if index + 1 < len(tables) else None
            # Tables one run measured share their caption's stamp and one reproduce block.
            last_of_run = following is None or _run_of(following) != _run_of(table)
            lines += _pivoted(table, stamped=last_of_run)
        for rows in _by_command(result.get("rows", [])):
            lines += _figures_table(rows)
        history = result["history"]
        lines += [f"How these figures came about: [{history}]({history})."]
    return "\n".join(lines) + "\n"


def _run_of(table: dict) -> tuple[str, ...]:
    return tuple(table[key] for key in ("machine", "date", "commit", "command"))


def _pivoted(table: dict, *, stamped: bool = True) -> list[str]:
    """A ``tables`` entry: its measurements pivoted, rows and columns by their labels; then
    (``stamped``) where and when it was measured, and the command."""
    labelled = [_formatted(table, measurement) for measurement in table["measurements"]]
    rows = list(dict.fromkeys(row for row, _, _ in labelled))
    columns = list(dict.fromkeys(column for _, column, _ in labelled))
    cells = {(row, column): cell for row, column, cell in labelled}
    lines = [
        "| " + " | ".join(["", *(_cell(c) for c in columns)]) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for row in rows:
        shown = [_cell(cells.get((row, column), "")) for column in columns]
        lines.append("| " + " | ".join([_cell(row), *shown]) + " |")
    lines = [f"*{table['caption']}*", "", *lines, ""]
    if not stamped:
        return lines
    stamp = f"Measured on {table['machine']}, commit {table['commit']} ({table['date']})"
    stamp += _simulation([table])
    return [*lines, stamp + ".", "", *_reproduce(table["command"])]


def _formatted(table: dict, measurement: dict) -> tuple[str, str, str]:
    """A measurement's row label, column label and cell."""
    return tuple(table[key].format(**measurement) for key in ("row_label", "column_label", "cell"))


def _figures_table(rows: list[dict]) -> list[str]:
    """Figures that one command measured: a table of figure and value, captioned with where
    and when they were measured (and which simulation made their events, where not today's
    default), and the command."""
    mixed = len({row.get("simulation", "") for row in rows}) > 1
    lines = ["| figure | value |", "|---|---|"]
    for row in rows:
        figure = row["figure"] + (_simulation([row]) if mixed else "")
        lines.append(f"| {_cell(figure)} | {_cell(row['value'])} |")
    machines = list(dict.fromkeys(row["machine"] for row in rows))
    commits = list(dict.fromkeys(f"{row['commit']} ({row['date']})" for row in rows))
    stamp = (f"Measured on {'; '.join(machines)}, "
             f"commit{'s' if len(commits) > 1 else ''} {', '.join(commits)}")  # fmt: skip
    stamp += "" if mixed else _simulation(rows)
    return [*lines, "", stamp + ".", "", *_reproduce(rows[0]["command"])]


def _simulation(measured: list[dict]) -> str:
    """Which simulation made the events of these rows or tables, all made by one (the end of a
    caption or of a figure's name): said where it is not the default of today."""
    simulation = measured[0].get("simulation")
    if not simulation:
        return ""
    return f"; events of the {simulation} simulation (the default before {REALISTIC_SINCE})"


def _by_command(rows: list[dict]) -> list[list[dict]]:
    """The rows, grouped by the command that measured them (in the order they first appear)."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["command"], []).append(row)
    return list(groups.values())


def _reproduce(command: str) -> list[str]:
    return ["Reproduce:", "", f"    {command}", ""]


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _anchor(title: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    kept = "".join(c for c in title.lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def main() -> None:
    parser = ToolParser(__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 when the page is stale")
    args = parser.parse_args()
    try:
        page = render(load_results(), OPENING.read_text())
    except (OSError, ValueError) as error:
        sys.exit(f"figures_page: {error}")
    if args.check or args.tiny:
        if PAGE.read_text() != page:
            sys.exit(
                "figures_page: docs/BENCHMARKS.md is not the page its result files give: "
                "run tools/figures_page.py"
            )
        print("figures_page: docs/BENCHMARKS.md is current")
        return
    staging = PAGE.with_name(PAGE.name + ".tmp")
    staging.write_text(page)
    staging.replace(PAGE)
    print(f"figures_page: wrote {PAGE.relative_to(REPOSITORY)} ({len(page.splitlines())} lines)")


if __name__ == "__main__":
    main()
