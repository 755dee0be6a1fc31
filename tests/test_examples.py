"""Every script in examples/ runs as a user would run it, on a tiny dataset.

Each runs in a temporary folder with the venv's ``bin`` first on ``PATH`` (``partgnn``,
``torchrun``, ``mpirun``): the fork server's folder of it (tests/forkserver.py), where
``partgnn``, ``torchrun``, their ranks and the examples' Python scripts start forked from a
process that has imported partgnn (``PARTGNN_TESTS_FORK=0``: the venv's own; ranks under
``mpirun`` always start fresh). The Slurm batch script runs through a fake ``srun`` that starts
the step's tasks on this machine with the variables Slurm gives them (``SLURM_PROCID``,
``SLURM_LOCALID``, ``SLURM_STEP_ID``, ...): 2 "nodes" x 2 tasks, so 2 graph-parallel groups of
2 ranks train data-parallel, as on a cluster.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from tests.forkserver import forked_bin, forked_python
from tests.subprocesses import run_command

REPOSITORY = Path(__file__).resolve().parents[1]
EXAMPLES = REPOSITORY / "examples"
#: A tiny model and run on the CPU (also on a machine with GPUs), appended to every training
#: command of the scripts.
TINY = "--set model.hidden=8 --set model.steps=2 --set model.mlp_layers=1 --set run.device=cpu"

FAKE_SRUN = """#!{python}
# A fake srun: starts SLURM_NTASKS tasks here with the variables of one job step.
import os, socket, subprocess, sys
args = [a for a in sys.argv[1:] if not a.startswith("--kill-on-bad-exit")]
n_tasks = int(os.environ["SLURM_NTASKS"])
per_node = int(os.environ["SLURM_NTASKS_PER_NODE"])
step_file = os.path.join(os.environ["FAKE_SLURM_DIR"], "steps")
step = sum(1 for _ in open(step_file)) if os.path.exists(step_file) else 0
open(step_file, "a").write("step\\n")
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
tasks = []
for rank in range(n_tasks):
    env = dict(os.environ, SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank % per_node),
               SLURM_NODEID=str(rank // per_node), SLURM_STEP_ID=str(step),
               SLURM_STEP_NUM_TASKS=str(n_tasks), SLURM_STEP_NODELIST="localhost",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    tasks.append(subprocess.Popen(args, env=env))
codes = [task.wait(timeout=200) for task in tasks]
sys.exit(max(codes, key=abs))
"""


@pytest.fixture(scope="module")
def example_data(tmp_path_factory) -> Path:
    """One data folder for every example (make_data.sh builds what is missing, once)."""
    return tmp_path_factory.mktemp("example-data")


@pytest.fixture
def shell_env(tmp_path: Path, example_data: Path) -> dict[str, str]:
    data = tmp_path / "data"  # the scripts' default DATA, relative to the folder they run in
    data.symlink_to(example_data, target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PARTGNN_"))}
    env.update(
        PATH=f"{forked_bin()}{os.pathsep}{env.get('PATH', '')}",
        OMP_NUM_THREADS="1",
        DATA=str(data),
        RUNS=str(tmp_path / "runs"),
        STEPS="2",
        EVENTS="4",
        PILEUP="5",
        EXTRA=TINY,
        DEVICE="cpu",
    )
    return env


def _run(command: list[str], env: dict[str, str], cwd: Path) -> str:
    done = run_command(command, env=env, cwd=cwd)
    assert done.returncode == 0, (
        f"{' '.join(command)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout


def _evaluation(path: Path) -> dict:
    metrics = json.loads(path.read_text())
    assert metrics["events"] >= 1 and 0 <= metrics["edge"]["efficiency"] <= 1
    return metrics


@pytest.mark.slow
def test_single_process(shell_env, tmp_path: Path):
    """With the data in a folder of the user's (DATA): every path the config names follows."""
    _run(["bash", str(EXAMPLES / "single_process.sh")], {**shell_env, "DATA": "mydata"}, tmp_path)
    _evaluation(tmp_path / "runs" / "full" / "evaluation.json")
    assert (tmp_path / "mydata" / "shards-metis2" / "meta.json").is_file()  # its own data


@pytest.mark.slow
def test_torchrun_halo(shell_env, tmp_path: Path):
    _run(["bash", str(EXAMPLES / "torchrun_halo.sh")], shell_env, tmp_path)
    metrics = _evaluation(tmp_path / "runs" / "halo" / "evaluation.json")
    assert "boundary_true_edges" in metrics["edge"]  # scored against the shards' cut


@pytest.mark.slow
def test_mpirun_halo(shell_env, tmp_path: Path):
    out = _run(["bash", str(EXAMPLES / "mpirun_halo.sh")], shell_env, tmp_path)
    assert "-> OK" in out
    summary = json.loads((tmp_path / "runs" / "halo-mpi" / "summary.json").read_text())
    assert summary["steps"] == 2


@pytest.mark.slow
def test_slurm_batch_script_through_a_fake_srun(shell_env, tmp_path: Path):
    _run(["bash", str(EXAMPLES / "make_data.sh")], {**shell_env, "PARTS": "2"}, tmp_path)
    fake = tmp_path / "fake-slurm"
    fake.mkdir()
    (fake / "srun").write_text(FAKE_SRUN.format(python=sys.executable))
    (fake / "srun").chmod(0o755)
    env = {
        **shell_env,
        "PATH": f"{fake}{os.pathsep}{shell_env['PATH']}",
        "FAKE_SLURM_DIR": str(fake),
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_NTASKS": "4",
        "SLURM_NTASKS_PER_NODE": "2",
        "SLURM_JOB_NODELIST": "localhost",
        "DEVICE": "cpu",
    }
    out = _run(["bash", str(EXAMPLES / "slurm_multinode.sbatch")], env, tmp_path)
    assert "selfcheck: 4 ranks (slurm" in out and "-> OK" in out
    summary = json.loads((tmp_path / "runs" / "halo-slurm" / "summary.json").read_text())
    assert summary["steps"] == 2
    assert summary["world_size"] == 4 and summary["group_size"] == 2


@pytest.mark.slow
def test_own_model(shell_env, tmp_path: Path):
    _run(["bash", str(EXAMPLES / "make_data.sh")], {**shell_env, "PARTS": "2"}, tmp_path)
    env = {**shell_env, "PYTHONPATH": str(EXAMPLES)}
    command = [forked_python(), str(EXAMPLES / "own_model.py"), "--data", shell_env["DATA"]]
    out = _run([*command, "--runs", shell_env["RUNS"], "--steps", "2"], env, tmp_path)
    error = float(out.strip().splitlines()[-1].rsplit(" ", 1)[-1])
    assert error < 1e-9, out


@pytest.mark.slow
def test_python_api_under_torchrun(shell_env, tmp_path: Path):
    out = _run(
        [str(forked_bin() / "torchrun"), "--standalone", "--nproc-per-node", "3",
         str(EXAMPLES / "python_api.py")],
        shell_env,
        tmp_path,
    )  # fmt: skip
    # The ranks share one pipe: find their reports by pattern, not by line.
    reports = re.findall(r"rank (\d)/3: \d+ owned \+ (\d+) halo nodes", out)
    assert sorted(rank for rank, _ in reports) == ["0", "1", "2"], out
    assert any(int(halo) > 0 for _, halo in reports), out


@pytest.mark.slow
def test_acorn_files_to_a_halo_run_and_back(shell_env, tmp_path: Path):
    from partgnn.data.formats.acorn import find_acorn_files, load_acorn_file

    _run(["bash", str(EXAMPLES / "acorn_to_halo.sh")], shell_env, tmp_path)
    out = tmp_path / "runs" / "acorn"
    metrics = _evaluation(out / "evaluation.json")
    assert 0 <= metrics["track"]["efficiency_atlas"] <= 1
    written = find_acorn_files(out / "acorn-scored")
    originals = find_acorn_files(Path(shell_env["DATA"]) / "acorn" / "testset")
    assert [p.name for p in written] == [p.name for p in originals] and written
    scored = load_acorn_file(written[0])
    assert scored["edge_scores"].shape == scored["edge_y"].shape
    assert scored["hit_track_labels"].shape == scored["hit_x"].shape
