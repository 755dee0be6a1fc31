"""Launcher detection from the environment alone (no process is started), and Slurm host lists."""

from __future__ import annotations

import pytest

from partgnn.distributed.launch_env import LaunchInfo, detect_launcher, expand_hostlist
from partgnn.errors import InputError


def test_no_launcher_is_single():
    assert detect_launcher({}) == LaunchInfo("single", 0, 1, 0)


def test_torchrun():
    env = {
        "TORCHELASTIC_RUN_ID": "abc",
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "MASTER_ADDR": "n01",
        "MASTER_PORT": "29500",
    }
    assert detect_launcher(env) == LaunchInfo("torchrun", 3, 4, 1, "n01", 29500)


def test_explicit_env_without_torchrun():
    env = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1234"}
    # LOCAL_RANK defaults to 0, as torch's env:// does.
    assert detect_launcher(env) == LaunchInfo("env", 1, 2, 0, "h", 1234)


def test_explicit_env_missing_address_is_an_error():
    with pytest.raises(InputError, match="MASTER_ADDR, MASTER_PORT missing"):
        detect_launcher({"RANK": "0", "WORLD_SIZE": "2"})


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x' is not an integer"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK=2 is not below WORLD_SIZE=2"),
        ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE=0 must be >= 1"),
        ({"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "70000"}, "not a TCP port"),
    ],
)
def test_malformed_variables(env, message):
    env = {"MASTER_ADDR": "h", "MASTER_PORT": "1", **env}
    with pytest.raises(InputError, match=message):
        detect_launcher(env)


def test_mpich_hydra():
    env = {"PMI_RANK": "1", "PMI_SIZE": "3", "MPI_LOCALRANKID": "1", "PMI_FD": "9"}
    assert detect_launcher(env) == LaunchInfo("mpi", 1, 3, 1)


def test_open_mpi():
    env = {
        "OMPI_COMM_WORLD_RANK": "5",
        "OMPI_COMM_WORLD_SIZE": "8",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "PMIX_RANK": "5",
        "MASTER_ADDR": "n01",
    }
    assert detect_launcher(env) == LaunchInfo("mpi", 5, 8, 1, "n01", None)


def test_pmix_alone_leaves_size_and_local_rank_to_mpi():
    assert detect_launcher({"PMIX_RANK": "2"}) == LaunchInfo("mpi", 2, None, None)


SLURM_STEP = {
    "SLURM_JOB_ID": "123456",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "5",
    "SLURM_NTASKS": "8",
    "SLURM_LOCALID": "1",
    "SLURM_STEP_NODELIST": "gpu[007-010]",
    "SLURM_JOB_NODELIST": "gpu[001-010]",
}


def test_srun_step():
    # First host of the *step*, port derived from the job and step ids.
    assert detect_launcher(SLURM_STEP) == LaunchInfo(
        "slurm", 5, 8, 1, "gpu007", 20000 + 123456 % 20000
    )


def test_srun_step_prefers_master_variables_and_step_task_count():
    env = {
        **SLURM_STEP,
        "SLURM_STEP_NUM_TASKS": "6",
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "4242",
    }
    assert detect_launcher(env) == LaunchInfo("slurm", 5, 6, 1, "10.0.0.1", 4242)


def test_srun_steps_side_by_side_get_different_ports():
    ports = {detect_launcher({**SLURM_STEP, "SLURM_STEP_ID": str(s)}).master_port for s in (0, 1)}
    assert len(ports) == 2
    assert all(20000 <= p < 40000 for p in ports)


def test_srun_with_pmi2_is_slurm():
    # srun --mpi=pmi2 also sets PMI_RANK/PMI_SIZE (same numbers): Slurm, no mpi4py needed.
    env = {**SLURM_STEP, "PMI_RANK": "5", "PMI_SIZE": "8", "PMI_FD": "7"}
    assert detect_launcher(env).launcher == "slurm"


def test_mpirun_inside_an_allocation_is_mpi():
    # Hydra started its proxies with srun: the ranks inherit that step's per-node SLURM_PROCID.
    env = {**SLURM_STEP, "SLURM_PROCID": "0", "SLURM_NTASKS": "2"}
    env |= {"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1"}
    assert detect_launcher(env) == LaunchInfo("mpi", 3, 4, 1)
    env = {**SLURM_STEP, "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4"}
    assert detect_launcher(env).launcher == "mpi"


def test_torchrun_beats_slurm_and_mpi():
    # srun torchrun ...: one torchrun per node, SLURM_PROCID counts nodes.
    env = {**SLURM_STEP, "PMI_RANK": "5", "PMI_SIZE": "8", "MPI_LOCALRANKID": "0"}
    env |= {"TORCHELASTIC_RUN_ID": "j", "RANK": "17", "WORLD_SIZE": "32", "LOCAL_RANK": "1"}
    env |= {"MASTER_ADDR": "gpu007", "MASTER_PORT": "29500"}
    assert detect_launcher(env) == LaunchInfo("torchrun", 17, 32, 1, "gpu007", 29500)


@pytest.mark.parametrize("step_id", [None, "4294967294", "4294967295", "4294967290"])
def test_batch_script_without_srun_is_one_process(step_id):
    # sbatch -n 8 runs the script once, with SLURM_PROCID=0 and SLURM_NTASKS=8: not 8 ranks.
    env = {k: v for k, v in SLURM_STEP.items() if k != "SLURM_STEP_ID"}
    env["SLURM_PROCID"] = "0"
    if step_id is not None:
        env["SLURM_STEP_ID"] = step_id  # Batch, extern and interactive steps.
    assert detect_launcher(env).launcher == "single"


def test_slurm_without_node_list_needs_master_addr():
    env = {k: v for k, v in SLURM_STEP.items() if not k.endswith("NODELIST")}
    with pytest.raises(InputError, match="set MASTER_ADDR"):
        detect_launcher(env)


def test_slurm_single_task_needs_no_address():
    env = {"SLURM_STEP_ID": "2", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}
    assert detect_launcher(env) == LaunchInfo("slurm", 0, 1, 0)


@pytest.mark.parametrize(
    ("hostlist", "hosts"),
    [
        ("node01", ["node01"]),
        ("node[01-04]", ["node01", "node02", "node03", "node04"]),
        ("gpu[8-11],login1", ["gpu8", "gpu9", "gpu10", "gpu11", "login1"]),
        ("a[001,003-004]-ib", ["a001-ib", "a003-ib", "a004-ib"]),
        ("r[1-2]n[01-02]", ["r1n01", "r1n02", "r2n01", "r2n02"]),
        ("x[9-10],y", ["x9", "x10", "y"]),
        ("", []),
    ],
)
def test_expand_hostlist(hostlist, hosts):
    assert expand_hostlist(hostlist) == hosts


@pytest.mark.parametrize("hostlist", ["node[01-04", "node01]", "node[a-b]", "n[5-2]"])
def test_expand_hostlist_rejects_malformed(hostlist):
    with pytest.raises(InputError, match="Slurm host list"):
        expand_hostlist(hostlist)
