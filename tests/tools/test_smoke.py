"""Every tool a document quotes runs in its tiny mode (``--tiny``: the smallest run through
every code path), so a command quoted in BENCHMARKS.md or a history page cannot break unnoticed.

Each tool runs as a user runs it (``python tools/NAME.py --tiny ...`` in a fresh folder) and
must exit 0; the figures it prints are not checked (tiny runs measure nothing).
"""

from __future__ import annotations

import json
import re
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from partgnn.cli.main import main
from tests.distributed.launch import REPOSITORY, child_env
from tests.forkserver import forked_python
from tests.subprocesses import run_command
from tools._two_hosts import unavailable_reason

TOOLS = REPOSITORY / "tools"
#: Where tools are quoted: README, the docs, the history pages, the result files.
DOCUMENTS = [
    REPOSITORY / "README.md",
    *sorted((REPOSITORY / "docs").glob("*.md")),
    *sorted((REPOSITORY / "docs" / "history").glob("*.md")),
    *sorted((REPOSITORY / "docs" / "results" / "figures").glob("*.json")),
]
#: Tools whose own tests run them (a tiny run here would repeat those).
TESTED_ELSEWHERE = {
    "soak": "tests/reliability/test_soak.py",
    "validate_gpu": "tests/tools/test_validate_gpu.py",
    "make_pretrained": "tests/tools/test_make_pretrained.py",
    "score_exported": "tests/export/test_export_command.py",
}
#: Tools that need data: the arguments after ``--tiny`` (``{data}`` is the smoke dataset).
ARGUMENTS = {
    "bench_module_map": ["{data}/events.h5", "map={data}/map.npz", "--coverage"],
    "flip_sweep": ["{data}/graphs.h5"],
    "bench_data_path": ["--out", "out"],
    "bench_full_recipe": [
        "--out",
        "out",
        "--realism",
        "secondaries",
        "--track-building",
        "junction",
        "--impure-rate",
        "0.5",
    ],
    "bench_full_variants": ["--out", "out"],
}
#: Tools that run in one process: run through ``runpy`` in the test's process (no process
#: start), with ``sys.argv`` and the working folder as a user's run has them.
IN_PROCESS = {
    "bench_data", "bench_partition", "bench_tracks", "studies/bench_simulation_realism",
    "bench_module_map", "bench_roofline", "studies/bench_work_model", "flip_sweep", "figures_page",
    "bench_freed_heap", "studies/bench_scaling_model", "studies/bench_field", "bench_map_losses",
    "studies/bench_secondaries", "studies/bench_map_vertex_radius",
}  # fmt: skip
#: Tools run by a test of their own below.
OWN_TEST = {"bench_recipe", "bench_compare", "bench_peer", "bench_hosts", "bench_gpu",
            "bench_launch_budget"}  # fmt: skip
#: Tools that start several ranks (slow tier).
DISTRIBUTED = {
    "bench_balance", "bench_lr_scaling", "bench_data_path", "bench_exchange",
    "bench_full_recipe", "bench_full_variants", "bench_halo_step", "studies/bench_pyg_refusals",
    "bench_train", "weights_fingerprint", "studies/bench_work_model", "bench_recipe_step",
    "bench_input_width",
}  # fmt: skip


def quoted_tools() -> set[str]:
    """The tools the documents quote (``tools/NAME.py``; a study ``tools/studies/NAME.py`` as
    ``studies/NAME``)."""
    names = set()
    for document in DOCUMENTS:
        names.update(
            re.findall(r"(?<![\w/])tools/((?:studies/)?[a-z][a-z_]*)\.py", document.read_text())
        )
    return names


SMOKED = sorted(quoted_tools() - OWN_TEST - set(TESTED_ELSEWHERE))


def test_every_quoted_tool_has_a_smoke_run():
    quoted = quoted_tools()
    assert len(quoted) >= 20
    missing = [name for name in quoted if not (TOOLS / f"{name}.py").is_file()]
    assert not missing, f"documents quote tools that do not exist: {missing}"
    for name in TESTED_ELSEWHERE.values():
        assert (REPOSITORY / name).is_file()


@pytest.fixture(scope="module")
def smoke_data(tmp_path_factory) -> Path:
    """Four simulated pile-up-3 events, their pT > 1 GeV graphs and a module map fitted on them."""
    folder = tmp_path_factory.mktemp("smoke")
    events, graphs = folder / "events.h5", folder / "graphs.h5"
    for command in (
        ["simulate", "--events", "4", "--pileup", "3", "--seed", "5", "--out", events],
        ["build-graphs", events, "--pt-min", "1", "--out", graphs],
        ["fit-module-map", events, "--pt-min", "1", "--out", folder / "map.npz"],
    ):
        assert main([str(argument) for argument in command]) == 0
    return folder


def _run_tool(name: str, arguments: list[str], cwd: Path):
    done = run_command([forked_python(), str(TOOLS / f"{name}.py"), "--tiny", *arguments],
                       cwd=cwd, env=child_env())  # fmt: skip
    assert done.returncode == 0, f"tools/{name}.py --tiny failed:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n in DISTRIBUTED else n for n in SMOKED],
)
def test_the_tool_runs_tiny(name, smoke_data, tmp_path, monkeypatch):
    arguments = [a.format(data=smoke_data) for a in ARGUMENTS.get(name, [])]
    if name not in IN_PROCESS:
        _run_tool(name, arguments, tmp_path)
        return
    script = TOOLS / f"{name}.py"
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(TOOLS))
    monkeypatch.setattr(sys, "argv", [str(script), "--tiny", *arguments])
    threads = torch.get_num_threads()
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as stop:
        assert stop.code in (None, 0), f"tools/{name}.py --tiny: {stop.code}"
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
def test_the_recipe_then_the_comparison_on_it_run_tiny(tmp_path):
    """bench_compare works on what bench_recipe leaves (its --recipe folder)."""
    _run_tool("bench_recipe", ["--out", "recipe"], tmp_path)
    done = _run_tool("bench_compare", ["--recipe", "recipe", "--out", "compare"], tmp_path)
    assert "| halo |" in done.stdout


def test_bench_peer_runs_its_partgnn_worker_and_names_a_missing_peer_source(tmp_path):
    """The peer's source is not in the checkout (PEER/README.md says how to fetch
    it): without it the tool says so in one line; partgnn's worker runs on a tiny graph."""
    rng = np.random.default_rng(0)
    graph = tmp_path / "g.npz"
    np.savez(graph, x=rng.standard_normal((50, 3)).astype(np.float32),
             edge_index=rng.integers(0, 50, (2, 200)), y=rng.random(200) < 0.2)  # fmt: skip
    for worker in ("partgnn", "profile-partgnn"):
        done = _run_tool("bench_peer", ["--worker", worker, "--graph", str(graph)], tmp_path)
        assert '"params"' in done.stdout
    done = run_command(
        [forked_python(), str(TOOLS / "bench_peer.py"), "--tiny", "--acorn-src", str(tmp_path)],
        env=child_env(),
    )
    assert done.returncode == 1 and done.stderr.strip().endswith("README.md)"), done.stderr


def test_bench_gpu_scores_on_the_cpu_and_names_a_missing_peer_source(tmp_path):
    """Its dry run here (``--device cpu``): the scoring part writes its table; the peer part
    without the peer's source says so in one line."""
    out = tmp_path / "b"
    _run_tool("bench_gpu", ["--out", str(out), "--device", "cpu", "--parts", "score"], tmp_path)
    assert "| 1 | " in (out / "gpu_bench.md").read_text()
    done = run_command(
        [forked_python(), str(TOOLS / "bench_gpu.py"), "--tiny", "--out", str(out), "--device",
         "cpu", "--parts", "peer", "--acorn-src", str(tmp_path)],
        env=child_env(),
    )  # fmt: skip
    assert done.returncode == 1 and done.stderr.strip().endswith("README.md)"), done.stderr


def test_bench_launch_budget_counts_partgnn_and_names_a_missing_peer_source(tmp_path):
    """Without the peer's source (not in the checkout) partgnn's operations are counted alone;
    asking for the reference without it is one line."""
    out = tmp_path / "b"
    _run_tool("bench_launch_budget", ["--out", str(out), "--no-reference"], tmp_path)
    result = json.loads((out / "launch_budget.json").read_text())
    on = [r for r in result["rows"] if r["model"] == "partgnn (recompute on)"]
    off = [r for r in result["rows"] if r["model"] == "partgnn (recompute off)"]
    assert on and all(a["operations"] > b["operations"] > 100 for a, b in zip(on, off, strict=True))
    assert all("step_s" in r for r in result["rows"] if r["edges"] == 500)
    assert all(sum(r["phases"].values()) == r["operations"] for r in result["rows"])
    assert all(r["phases"]["backward"] > r["phases"]["forward"] > 0 for r in on)
    breakdown = result["breakdown"]
    assert breakdown["per_step"] > 0 and breakdown["per_chunk"] > 0
    assert breakdown["outside_steps"] + 8 * breakdown["per_step"] == breakdown["operations"]
    done = run_command(
        [forked_python(), str(TOOLS / "bench_launch_budget.py"), "--tiny", "--out", str(out),
         "--acorn-src", str(tmp_path)],
        env=child_env(),
    )  # fmt: skip
    assert done.returncode == 1 and done.stderr.strip().endswith("README.md)"), done.stderr


@pytest.mark.slow
def test_bench_hosts_runs_tiny_across_the_two_test_hosts(tmp_path):
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"two hosts cannot be made here: {reason}")
    _run_tool("bench_hosts", [], tmp_path)


def test_weights_fingerprint_names_a_missing_reference_before_any_run(tmp_path):
    done = run_command([forked_python(), str(TOOLS / "weights_fingerprint.py"), "--tiny",
                        "--expect", "missing.json"], cwd=tmp_path, env=child_env())  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == "weights_fingerprint: missing.json: file not found"
    assert done.stdout == ""  # no run before the check
