"""What the benchmark scripts share: their common options, markdown tables, timing, running
``partgnn`` commands, and the result files the current-figures page is generated from.

Every tool builds its parser with :class:`ToolParser`, which adds

* ``--tiny``: the smallest run that still goes through every code path of the tool (seconds;
  the suite runs each tool so, ``tests/tools/test_smoke.py``); options given explicitly win;
* ``--record [FILE]``: the figures the tool measured are written into a result file (by default
  the tool's own ``docs/results/figures/<name>.json``), with the machine, date, commit and
  command filled in; ``tools/figures_page.py`` then regenerates ``docs/BENCHMARKS.md`` from
  those files. A tiny run refuses to record (its figures are not the capability's).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import redirect_stderr, redirect_stdout
from datetime import date
from pathlib import Path
from typing import Any

REPOSITORY = Path(__file__).resolve().parents[1]
#: Where the result files of the current-figures page live.
FIGURES_DIR = REPOSITORY / "docs" / "results" / "figures"


#: partgnn commands that prepare data or score it: a tool measures neither, so they run in the
#: tool's own process (:func:`partgnn`, ``in_process``).
PREPARATION = frozenset({"simulate", "import-trackml", "build-graphs", "fit-module-map",
                         "partition", "evaluate"})  # fmt: skip


class ToolParser(argparse.ArgumentParser):
    """An argument parser with the options every tool has (``--tiny``, ``--record``).

    Args:
        description: The tool's docstring.
        figures: The tool's result file under ``docs/results/figures/`` (without ``.json``),
            or ``None`` for a tool that records no figures.
    """

    def __init__(self, description: str | None, *, figures: str | None = None) -> None:
        super().__init__(
            description=description, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        self._tiny_defaults: dict[str, Any] = {}
        self._renamed: dict[str, str] = {}
        self.add_argument(
            "--tiny",
            action="store_true",
            help="the smallest run through every code path (seconds); for smoke tests",
        )
        if figures is not None:
            self.add_argument(
                "--record",
                nargs="?",
                type=Path,
                const=FIGURES_DIR / f"{figures}.json",
                default=None,
                metavar="FILE",
                help=f"write the measured figures into FILE (default docs/results/figures/"
                f"{figures}.json), then run tools/figures_page.py",
            )

    def tiny(self, **defaults: Any) -> None:
        """Sets the values ``--tiny`` gives the options not given on the command line."""
        self._tiny_defaults.update(defaults)

    def renamed(self, old: str, new: str) -> None:
        """Reads option ``old`` (its former name) as ``new``, with a one-line notice."""
        self._renamed[old] = new

    def _new_names(self, args: Sequence[str]) -> list[str]:
        """``args`` with the options' former names replaced by their names (said once each)."""
        named = []
        for arg in args:
            option, sep, value = arg.partition("=")
            if option in self._renamed:
                given = [a.partition("=")[0] for a in args]
                if self._renamed[option] in given:
                    self.error(f"{option} is the former name of {self._renamed[option]}: give one")
                print(
                    f"{self.prog}: notice: {option} is now called {self._renamed[option]} "
                    f"(read as it)",
                    file=sys.stderr,
                )
                arg = self._renamed[option] + sep + value
            named.append(arg)
        return named

    def parse_args(self, args: Sequence[str] | None = None, namespace=None):  # type: ignore[override]
        if self._renamed:
            args = self._new_names(sys.argv[1:] if args is None else list(args))
        parsed = super().parse_args(args, namespace)
        if parsed.tiny and self._tiny_defaults:
            self.set_defaults(**self._tiny_defaults)
            parsed = super().parse_args(args, namespace)
        if parsed.tiny and getattr(parsed, "record", None) is not None:
            self.error("--tiny runs are smoke tests: their figures are not recorded")
        if getattr(parsed, "record", None) is not None and commit().endswith(CHANGED):
            self.error(
                "--record: the code has uncommitted changes; commit them first, so that the "
                "figures name a commit one can check out"
            )
        return parsed


#: The simulation's realism switches (``partgnn simulate --NAME``, issue 50).
REALISM_SWITCHES = ("module-planes", "field-profile", "secondaries")


def add_realism_option(parser: argparse.ArgumentParser) -> None:
    """``--realism NAME ...``: simulate with these switches of ``partgnn simulate`` on and the
    others off (default: all on, as ``partgnn simulate``; ``none``: the ideal detector)."""
    parser.add_argument(
        "--realism", nargs="+", default=list(REALISM_SWITCHES),
        choices=(*REALISM_SWITCHES, "none"),
        help="simulate with these switches of partgnn simulate on (--module-planes, ...) and "
        "the others off (default: all on; none: all off)",
    )  # fmt: skip


def realism_arguments(switches: Sequence[str]) -> list[str]:
    """The ``partgnn simulate`` options of ``--realism``'s switches: ``--NAME`` for each one
    named, ``--no-NAME`` for the others.

    Raises:
        SystemExit: ``none`` named beside a switch.
    """
    if "none" in switches and len(switches) > 1:
        raise SystemExit(
            f"--realism none: named beside {' '.join(sorted(set(switches) - {'none'}))}"
        )
    return [f"--{name}" if name in switches else f"--no-{name}" for name in REALISM_SWITCHES]


#: ``--fused`` and the like: which settings of a switch a tool measures.
ON_OFF_CHOICES = ("off", "on", "both")


def on_off_settings(choice: str) -> list[bool]:
    """The settings of a switch an ``off``/``on``/``both`` option asks for (``both``: off first)."""
    return {"off": [False], "on": [True], "both": [False, True]}[choice]


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A markdown table: ``header`` and one line per row (cells formatted with ``str``)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def best_of(run: Callable[[], object], repeats: int) -> float:
    """The least wall time of ``repeats`` calls of ``run``, in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def torchrun(ranks: int, *target: str | os.PathLike[str]) -> list[str]:
    """``torchrun --standalone --nproc-per-node RANKS TARGET...`` of this environment: the one
    way the tools start ranks (``--standalone``: each run on a rendezvous port of its own, so
    no two runs share a fixed port). ``target``: ``"-m", "partgnn", ...`` or a script and its
    arguments."""
    return [str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc-per-node",
            str(ranks), *map(str, target)]  # fmt: skip


def partgnn_launcher(ranks: int) -> list[str]:
    """The command that starts ``partgnn`` on ``ranks`` processes of this machine: the
    ``partgnn`` script for one, :func:`torchrun` of ``-m partgnn`` for more."""
    if ranks == 1:
        return [str(Path(sys.executable).parent / "partgnn")]
    return torchrun(ranks, "-m", "partgnn")


def partgnn(
    *arguments: str | os.PathLike[str],
    ranks: int = 1,
    in_process: bool | None = None,
    threads: int | None = 1,
    quiet: bool = True,
    echo: bool = False,
) -> None:
    """Runs one ``partgnn`` command; a failure stops the tool with the command's output.

    Args:
        arguments: The command and its arguments (``"simulate", "--events", "3", ...``).
        ranks: Processes: 1 runs ``partgnn`` itself, more run it under
            ``torchrun --standalone --nproc-per-node RANKS``.
        in_process: Run it in this process, through partgnn's entry point (no process start:
            seconds saved per command). For data preparation, whose time and memory the tool
            does not measure; a command the tool measures runs in a process of its own.
            ``None``: in this process when it is one rank's :data:`PREPARATION` command.
        threads: ``OMP_NUM_THREADS`` of the command's processes (``None``: this process's).
        quiet: Keep the command's output unless it fails.
        echo: Print the command (``$ partgnn ...``) to stderr before it runs.
    """
    arguments = tuple(str(argument) for argument in arguments)
    shown = ("torchrun ... " if ranks > 1 else "") + "partgnn " + " ".join(arguments)
    if echo:
        print(f"$ {shown}", file=sys.stderr, flush=True)
    if in_process is None:
        in_process = ranks == 1 and arguments[0] in PREPARATION
    if in_process:
        assert ranks == 1, "a command of several ranks runs under torchrun"
        from partgnn.cli.main import main as partgnn_main

        output = io.StringIO()
        with redirect_stdout(output), redirect_stderr(output):
            code = partgnn_main(list(arguments))
        if code:
            sys.exit(f"{shown} failed (exit {code}):\n{output.getvalue()}")
        if not quiet:
            print(output.getvalue(), end="")
        return
    launcher = partgnn_launcher(ranks)
    env = dict(os.environ)
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    done = subprocess.run(
        [*launcher, *arguments], env=env, check=False, text=True,
        capture_output=quiet,
    )  # fmt: skip
    if done.returncode:
        output = f"{done.stdout}{done.stderr}" if quiet else ""
        sys.exit(f"{shown} failed (exit {done.returncode}):\n{output}")


def planned_mib(config: Path) -> list[float]:
    """Each rank's peak as ``partgnn plan --config CONFIG --json`` predicts it [MiB] (in a
    process of its own, one thread: as the ranks it plans run)."""
    done = subprocess.run(
        [*partgnn_launcher(1), "plan", "--config", str(config), "--json"],
        env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True, check=True,
    )  # fmt: skip
    return [rank["total_bytes"] / 2**20 for rank in json.loads(done.stdout)["ranks"]]


def train_sitting(
    config: Path, overrides: Sequence[str], ranks: int, *, log: Path | None = None,
    minutes: float | None = None,
) -> tuple[int, float | None]:  # fmt: skip
    """One sitting of ``torchrun ... partgnn train --config CONFIG --resume auto --set ...`` on
    ``ranks`` ranks of this machine (output to ``log``, else inherited).

    With ``minutes``, the ranks get the trainer's stop signal (SIGUSR1) at that wall time: each
    finishes its step, they checkpoint and exit (torchrun, sent SIGTERM, kills its ranks after
    30 s, which a long step outlasts).

    Returns:
        The exit status, and the time (``time.time()``) the ranks were signalled (``None``: they
        ended by themselves).
    """
    command = torchrun(
        ranks, "-m", "partgnn", "train", "--config", config, "--resume", "auto",
        *(a for o in overrides for a in ("--set", o)),
    )  # fmt: skip
    print("$ " + " ".join(["torchrun", *command[1:]]), file=sys.stderr, flush=True)
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    stopped = None
    output = open(log, "a") if log is not None else None  # noqa: SIM115 (closed below)
    try:
        process = subprocess.Popen(
            command, env=env, stdout=output, stderr=subprocess.STDOUT if output else None
        )
        try:
            code = process.wait(timeout=None if minutes is None else minutes * 60)
        except subprocess.TimeoutExpired:
            stopped = time.time()
            for child in _children(process.pid):
                os.kill(child, signal.SIGUSR1)
            code = process.wait()
        except BaseException:
            process.terminate()
            process.wait()
            raise
    finally:
        if output is not None:
            output.close()
    return code, stopped


def recorded_sitting(
    config: Path, overrides: Sequence[str], ranks: int, *, run_dir: Path, sittings: Path,
    note: Sequence[str] = (), log: Path | None = None, minutes: float | None = None,
) -> None:  # fmt: skip
    """:func:`train_sitting` of the run in ``run_dir``, its start and stop (``time.time()``)
    appended to the JSON list ``sittings`` with ``note`` (also when it fails: the time was
    spent); exits in one line when it failed: a non-zero exit of ranks that ended by
    themselves, or no checkpoint written by ranks that were stopped."""
    recorded = json.loads(sittings.read_text()) if sittings.exists() else []
    start = time.time()
    try:
        code, stopped = train_sitting(config, overrides, ranks, log=log, minutes=minutes)
    finally:
        recorded.append({"start": start, "stop": time.time(), "overrides": list(note)})
        sittings.write_text(json.dumps(recorded, indent=1) + "\n")
    see = f": see {log}" if log is not None else ""
    last = run_dir / "checkpoints" / "last.pt"
    if stopped is not None and not (last.exists() and last.stat().st_mtime >= stopped):
        sys.exit(f"the ranks wrote no checkpoint when stopped{see}")
    if stopped is None and code != 0:
        sys.exit(f"training stopped with exit {code}{see}")


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux ``/proc``)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            children.append(int(stat.parent.name))
    return children


def machine() -> str:
    """This machine in words: cores, architecture and CPU (:func:`cpu`), memory and GPU."""
    import torch

    memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30  # as sold
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{os.cpu_count()} cores {platform.machine()} ({cpu()}), {memory_gb:.0f} GB, {gpu}"


def cpu() -> str:
    """The CPU as the last bits of float arithmetic and the kernels' speed depend on it: its
    model name and the vector instructions torch uses on it (AVX2, AVX512...)."""
    import torch

    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            name = next(
                (line.split(":", 1)[1].strip() for line in info if line.startswith("model name")),
                name,
            )
    except OSError:
        pass
    return f"{name}, {torch.backends.cpu.get_cpu_capability()}"


def commit() -> str:
    """The checkout's commit (short), with ``+changes`` when the code in the work tree differs
    from it (changes under ``docs/`` do not count)."""

    def git(*arguments: str) -> str:
        return subprocess.run(
            ["git", *arguments], cwd=REPOSITORY, capture_output=True, text=True, check=False
        ).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    # The result files and the page are what a recording run changes: not the code measured.
    changed = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs")
    return head + (CHANGED if changed else "")


#: What :func:`commit` adds to a commit the work tree's code differs from.
CHANGED = "+changes"


def record_table(
    path: Path | None,
    name: str,
    caption: str,
    measurements: Sequence[dict[str, Any]],
    *,
    row_label: str,
    column_label: str,
    cell: str,
) -> None:
    """Writes one table of measurements into a result file of the current-figures page
    (``tools/figures_page.py`` pivots it: a row per ``row_label``, a column per
    ``column_label``, each a format of a measurement's parameters, and ``cell`` the format of
    its numbers).

    The table replaces the one of the same ``name`` (other tables and rows stay), stamped with
    this machine, today's date, the commit and the command line that ran.

    Args:
        path: The result file (``None``: nothing is recorded).
        name: The table's name in the file.
        caption: What the table measures (a sentence).
        measurements: Each a mapping of parameters and numbers (JSON values), e.g.
            ``{"model": "partgnn", "precision": "bf16", "operations": 982}``.
        row_label, column_label, cell: ``str.format`` templates of a measurement's fields.
    """
    if path is None:
        return
    result = _result_file(path)
    table = {"name": name, "caption": caption, "row_label": row_label,
             "column_label": column_label, "cell": cell, **_stamp(),
             "measurements": [dict(m) for m in measurements]}  # fmt: skip
    tables = {t["name"]: t for t in result.get("tables", [])}
    tables[name] = table
    result["tables"] = list(tables.values())
    _write_result_file(path, result)
    print(f"recorded table {name!r} in {path}; now run tools/figures_page.py")


def record_evaluations(path: Path | None, name: str, caption: str, evaluations: dict) -> None:
    """Writes a table of evaluations (``partgnn evaluate``'s records, by label) into a result
    file: per evaluation, the figures a model card quotes (acorn's target edge efficiency and
    masked purity, AUC, double-majority and ATLAS track efficiency, impure rate)."""
    from partgnn.json_files import number

    measurements = [
        {"label": label, "events": result.events, "cut": result.cut,
         **{key: number(value) for key, value in result.held_out_figures().figures.items()}}
        for label, result in evaluations.items()
    ]  # fmt: skip
    record_table(
        path, name, caption, measurements,
        row_label="{label} ({events} events, cut {cut:.4g})",
        column_label="target edge eff. / masked purity, AUC, track eff. (ATLAS), impure",
        cell="{edge_target_efficiency:.4f} / {edge_masked_purity:.4f}, {edge_auc:.4f}, "
        "{track_efficiency:.4f} ({track_efficiency_atlas:.4f}), {track_impure_rate:.4f}",
    )  # fmt: skip


def record_figures(path: Path | None, figures: Sequence[tuple[str, str]]) -> None:
    """Writes measured figures into a result file of the current-figures page.

    Each figure replaces the row of the same name (other rows stay), stamped with this
    machine, today's date, the commit and the command line that ran.

    Args:
        path: The result file (``None``: nothing is recorded).
        figures: ``(figure, value)`` pairs, e.g. ``("simulate, pile-up 200: seconds per
            event", "0.20")``.
    """
    if path is None:
        return
    result = _result_file(path)
    stamp = _stamp()
    rows = {row["figure"]: row for row in result.get("rows", [])}
    for figure, value in figures:
        rows[figure] = {"figure": figure, "value": value, **stamp}
    result["rows"] = list(rows.values())
    _write_result_file(path, result)
    print(f"recorded {len(figures)} figures in {path}; now run tools/figures_page.py")


def _result_file(path: Path) -> dict[str, Any]:
    """The content of a result file that exists (a tool does not make one: it needs a title,
    headline, order and history page)."""
    if not path.exists():
        sys.exit(
            f"{path}: no such result file: make it with a title, headline, order and history "
            "page (tools/figures_page.py says what a result file holds)"
        )
    return json.loads(path.read_text())


def _stamp() -> dict[str, str]:
    """Where, when and how a figure was measured: the machine, today, the commit, the command
    line that ran (without ``--record``)."""
    env = " ".join(
        f"{name}={os.environ[name]}" for name in STAMPED_ENVIRONMENT if name in os.environ
    )
    command = " ".join(
        part for part in (env, ".venv/bin/python", _tool_path(), shlex.join(_arguments())) if part
    )
    return {"machine": machine(), "date": date.today().isoformat(), "commit": commit(),
            "command": command}  # fmt: skip


#: The environment variables a figure's command line names: the thread count, and the CPU
#: capability torch and oneDNN are limited to (measuring a CPU without AVX-512 on one with it).
STAMPED_ENVIRONMENT = ("OMP_NUM_THREADS", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")


def _write_result_file(path: Path, result: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(path.name + ".tmp")
    staging.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    staging.replace(path)


def _tool_path() -> str:
    script = Path(sys.argv[0]).resolve()
    try:
        return str(script.relative_to(REPOSITORY))
    except ValueError:
        return str(script)


def _arguments() -> list[str]:
    """The command's arguments without ``--record`` and its value."""
    arguments, skip = [], False
    for argument in sys.argv[1:]:
        if skip:
            skip = False
            if not argument.startswith("-"):
                continue
        if argument == "--record":
            skip = True
            continue
        if argument.startswith("--record="):
            continue
        arguments.append(argument)
    return arguments
