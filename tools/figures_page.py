"""Writes docs/BENCHMARKS.md, the current-figures page, from the result files the tools write.

Each capability has one result file, ``docs/results/figures/<name>.json``: a title, the page
of docs/history/ that tells how its figures came about, an optional note, and one row per
figure (value, machine, date, commit, the command that measured it). Tools write their rows
with ``--record`` (``tools/_common.py``); this script turns the files into one short table per
capability, in the files' ``order``. The page's opening is ``docs/results/page_opening.md``.

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
COLUMNS = ("figure", "value", "machine", "date", "commit", "command")


def load_results(folder: Path = FIGURES_DIR) -> list[dict]:
    """The result files of ``folder``, in their ``order``.

    Raises:
        ValueError: A file lacks a field the page needs (naming the file and the field).
    """
    results = []
    for path in sorted(folder.glob("*.json")):
        result = json.loads(path.read_text())
        for field in ("title", "order", "history", "rows"):
            if field not in result:
                raise ValueError(f"{path}: no field {field!r}")
        for index, row in enumerate(result["rows"]):
            missing = [column for column in COLUMNS if not row.get(column)]
            if missing:
                raise ValueError(f"{path}: row {index} lacks {', '.join(missing)}")
        results.append({**result, "name": path.stem})
    return sorted(results, key=lambda result: (result["order"], result["name"]))


def render(results: list[dict], opening: str) -> str:
    """The page's markdown: the opening, an index, then one table per capability."""
    lines = [opening.rstrip(), "", "## Capabilities", ""]
    lines += [f"- [{result['title']}](#{_anchor(result['title'])})" for result in results]
    for result in results:
        lines += ["", f"## {result['title']}", ""]
        if result.get("note"):
            lines += [result["note"], ""]
        lines.append("| " + " | ".join(COLUMNS) + " |")
        lines.append("|" + "---|" * len(COLUMNS))
        for row in result["rows"]:
            cells = [_cell(row[column], code=column == "command") for column in COLUMNS]
            lines.append("| " + " | ".join(cells) + " |")
        history = result["history"]
        lines += ["", f"How these figures came about: [{history}]({history})."]
    return "\n".join(lines) + "\n"


def _cell(text: str, *, code: bool) -> str:
    text = str(text).replace("|", "\\|").replace("\n", " ")
    return f"`{text}`" if code else text


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
