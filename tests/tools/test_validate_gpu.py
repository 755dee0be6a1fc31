"""tools/validate_gpu.py: one line and exit 0 without a GPU; its checks run here on gloo."""

from __future__ import annotations

import json
import sys

import pytest

from tests.conftest import CUDA_AVAILABLE, gpu_env
from tests.distributed.launch import REPOSITORY, child_env
from tests.forkserver import forked_python
from tests.subprocesses import run_command

SCRIPT = REPOSITORY / "tools" / "validate_gpu.py"


@pytest.mark.skipif(CUDA_AVAILABLE, reason="says so only where there is no GPU")
def test_without_a_gpu_it_says_so_in_one_line_and_exits_0(tmp_path):
    done = run_command([sys.executable, str(SCRIPT), "--out", str(tmp_path / "v")])
    assert done.returncode == 0
    assert done.stdout.strip() == (
        "validate_gpu: no CUDA GPU on this machine (torch.cuda.is_available() is False)"
    )
    assert not (tmp_path / "v").exists()


def _validate(out, *arguments: str):
    done = run_command(
        [forked_python(), str(SCRIPT), "--out", str(out), "--device", "cpu", *arguments],
        env=child_env(),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1].startswith("validate_gpu: all checks passed")
    result = json.loads((out / "validation.json").read_text())
    assert result["passed"]
    return result, (out / "validation.md").read_text()


@pytest.mark.slow
def test_the_checks_run_on_gloo_and_write_json_and_markdown(tmp_path):
    result, table = _validate(tmp_path / "resume", "--max-ranks", "2", "--checks", "resume")
    (resume,) = result["resume"]
    assert resume["mode"] == "halo" and resume["P"] == 2
    assert resume["relative_difference"] <= 1e-9
    assert "Resume (halo, P = 2)" in table
    result, table = _validate(tmp_path / "selfcheck", "--max-ranks", "1", "--checks", "selfcheck")
    assert [(r["P"], r["transport"]) for r in result["selfcheck"]] == [(1, "auto")]
    assert result["selfcheck"][0]["gradients"] <= 1e-10
    assert "| 1 | auto |" in table


@pytest.mark.cuda
def test_this_machines_gpus_pass_the_validation(tmp_path):
    """The GPU tier: selfcheck on NCCL, halo == full in float64 on the GPUs, resume."""
    out = tmp_path / "v"
    done = run_command(
        [sys.executable, str(SCRIPT), "--out", str(out), "--checks", "selfcheck", "exact",
         "resume"],
        env=gpu_env(child_env()),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((out / "validation.json").read_text())["passed"]
