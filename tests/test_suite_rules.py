"""Rules the test suite keeps so that its verdicts mean the same on a loaded machine.

- No test asserts on a clock: speed is measured by the benchmarks in tools/, and a test that
  must tell a hang from a failure relies on a deadline instead (tests/subprocesses.py).
- No test waits for a command longer than pytest's own timeout allows: the command's deadline
  fires first, and its output appears in the failure.
- ``make test``'s workers take a file's tests as one unit (its module fixtures made once) and
  the tools' smoke runs one by one.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

from tests import conftest
from tests.subprocesses import PYTEST_TIMEOUT_S

TESTS = Path(__file__).resolve().parent
CLOCKS = {"perf_counter", "monotonic", "time", "perf_counter_ns", "monotonic_ns"}


def _clock_assertions(tree: ast.AST) -> list[int]:
    """Lines of ``assert`` statements that call ``time.<clock>()``."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Assert)
        for call in ast.walk(node.test)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr in CLOCKS
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id == "time"
    ]


def _long_timeouts(tree: ast.AST) -> list[int]:
    """Lines passing a literal ``timeout=`` of pytest's timeout or more."""
    return [
        keyword.value.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        for keyword in node.keywords
        if keyword.arg == "timeout"
        and isinstance(keyword.value, ast.Constant)
        and isinstance(keyword.value.value, int | float)
        and keyword.value.value >= PYTEST_TIMEOUT_S
    ]


def _breaches(rule: Callable[[ast.AST], list[int]]) -> dict[str, list[int]]:
    """The lines of every test file that ``rule`` finds, by file."""
    found = {}
    for path in sorted(TESTS.rglob("*.py")):
        lines = rule(ast.parse(path.read_text()))
        if lines:
            found[str(path.relative_to(TESTS))] = lines
    return found


def test_no_test_asserts_on_a_clock():
    assert _breaches(_clock_assertions) == {}


def test_no_command_may_outlive_pytests_timeout():
    assert _breaches(_long_timeouts) == {}


def test_the_deadline_constant_is_pytests_timeout(pytestconfig):
    assert float(pytestconfig.getini("timeout")) == PYTEST_TIMEOUT_S


def test_the_rules_find_what_they_forbid():
    code = (
        "import time\n"
        "start = time.perf_counter()\n"
        "assert time.perf_counter() - start < 1.0\n"
        "subprocess.run(cmd, timeout=600)\n"
        "subprocess.run(cmd, timeout=60)\n"
    )
    tree = ast.parse(code)
    assert _clock_assertions(tree) == [3]
    assert _long_timeouts(tree) == [4]


def test_a_commands_deadline_ends_before_pytests_timeout(monkeypatch):
    """Work before a command (an in-process reference, a kernel build on a busy machine)
    shortens its deadline, so it is killed with its output shown rather than by pytest."""
    import time

    from tests import subprocesses

    now = time.monotonic()
    monkeypatch.setattr(subprocesses, "_test_started", now)
    assert subprocesses.deadline_within_test(240) == 240
    monkeypatch.setattr(subprocesses, "_test_started", now - 200)
    left = subprocesses.deadline_within_test(240)
    assert 79 <= left <= 80  # 300 - 200 - 20
    monkeypatch.setattr(subprocesses, "_test_started", now - 299)
    assert subprocesses.deadline_within_test(240) == 1.0


class _Options:
    """The options xdist's schedulers read."""

    def __init__(self, **values) -> None:
        self.values = values
        self.option = SimpleNamespace(loadscopereorder=True)  # xdist's default

    def getvalue(self, name: str):
        return self.values[name]


def test_make_tests_workers_take_a_file_whole_and_the_smoke_runs_one_by_one():
    """(``--dist loadgroup`` with a group per file did this until pytest 9.2 silently dropped
    the groups, pytest-dev/pytest-xdist#1386: a file's module fixtures were made on both
    workers.)"""
    assert "--dist loadfile" in (TESTS.parent / "Makefile").read_text()
    options = {"numprocesses": 2, "tx": ["2*popen"]}
    scheduler = conftest.pytest_xdist_make_scheduler(_Options(dist="loadfile", **options), None)
    file_ids = [
        "tests/train/planning/test_footprint.py::test_a[False]",
        "tests/train/planning/test_footprint.py::b",
    ]
    assert {scheduler._split_scope(nodeid) for nodeid in file_ids} == {file_ids[0].split("::")[0]}
    smoke_ids = [f"tests/tools/test_smoke.py::test_the_tool_runs_tiny[{n}]" for n in ("a", "b")]
    assert {scheduler._split_scope(nodeid) for nodeid in smoke_ids} == set(smoke_ids)
    assert conftest.pytest_xdist_make_scheduler(_Options(dist="load", **options), None) is None


def test_files_start_heap_meters_first_then_slow_ones_in_collection_order():
    """xdist would order the files by their number of tests (the soak, one test, last): the
    workers take them in the order of their first test instead, which puts heap meters first
    and slow tests next."""
    config = _Options(dist="loadfile", numprocesses=2, tx=["2*popen"])
    conftest.pytest_xdist_make_scheduler(config, None)
    assert config.option.loadscopereorder is False
    items = [SimpleNamespace(name=name, keywords=set(marks)) for name, marks in (
        ("quick", ()), ("slow", ("slow",)), ("meter", ("heap_meter",)), ("quick2", ()),
        ("slow2", ("slow",)),
    )]  # fmt: skip
    conftest.pytest_collection_modifyitems(config, items)
    assert [item.name for item in items] == ["meter", "slow", "slow2", "quick", "quick2"]
