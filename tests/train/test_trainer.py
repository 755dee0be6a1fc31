"""The trainer in real processes: halo equals full, resume is exact, naive/ddp train, errors."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from partgnn.distributed.process_group import destroy_distributed, init_distributed
from partgnn.partition.event_split import PartitionOptions
from partgnn.partition.shard_writer import write_shards
from partgnn.train.config.config_file import load_config
from partgnn.train.items.standardisation import SCALER_FILE
from partgnn.train.run_directory import training_checkpoint
from partgnn.train.run_directory.saved_model import SavedModel
from partgnn.train.trainer import Trainer
from tests.distributed.launch import REPOSITORY, assert_all_succeeded, child_env, launch
from tests.subprocesses import DEADLINE_S, run_command
from tests.train.conftest import write_config
from tools._two_hosts import two_hosts, unavailable_reason


def _train(world_size: int, config: Path, tmp_path: Path, *extra: str) -> None:
    results = launch(
        world_size,
        "partgnn",
        ["train", "--config", str(config), *extra],
        workdir=tmp_path / f"logs-{config.stem}",
    )
    assert_all_succeeded(results)


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return SavedModel.read(run_dir / "checkpoints" / "last.pt").weights


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm().clamp(min=1e-300)).item()


def _metrics(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def _three_step_config(
    path: Path, dataset, mode: str, dtype: str, shards: str, hide: bool = True
) -> Path:
    return write_config(
        path,
        mode=mode,
        data={"graphs": str(dataset["graphs"]), "shards": str(dataset[shards])},
        optim={"epochs": 3, "max_steps": 3},
        run={"dir": str(path.with_suffix("")), "dtype": dtype, "hide_communication": hide},
    )


@pytest.fixture(scope="module")
def full_runs(dataset, tmp_path_factory) -> dict[str, Path]:
    """Three optimizer steps in mode full (one process, run here), per dtype."""
    folder = tmp_path_factory.mktemp("full-runs")
    runs = {}
    for dtype in ("float64", "float32"):
        config = _three_step_config(folder / f"full-{dtype}.yaml", dataset, "full", dtype, "phi1")
        context = init_distributed(device="cpu", timeout_s=60)
        try:
            Trainer(load_config(config), context).fit()
        finally:
            destroy_distributed(context)
        runs[dtype] = config.with_suffix("")
    return runs


@pytest.mark.slow
@pytest.mark.parametrize(("world_size", "hide"), [(2, True), (2, False), (3, True)])
def test_three_halo_steps_equal_full_mode(dataset, full_runs, tmp_path, world_size, hide):
    halo_runs = {}
    for dtype in ("float64", "float32"):
        config = _three_step_config(
            tmp_path / f"halo-{dtype}.yaml", dataset, "halo", dtype, f"phi{world_size}", hide
        )
        _train(world_size, config, tmp_path)
        halo_runs[dtype] = config.with_suffix("")
    full, halo = _weights(full_runs["float64"]), _weights(halo_runs["float64"])
    worst = max(_relative(halo[k], full[k]) for k in full)
    assert worst <= 1e-9, f"float64 weights differ by {worst:.3g}"
    # float32: Adam amplifies rounding in near-zero gradient elements, so compare the losses.
    losses = {
        mode: [float(r["train_loss"]) for r in _metrics(runs["float32"])]
        for mode, runs in (("full", full_runs), ("halo", halo_runs))
    }
    assert len(losses["full"]) == len(losses["halo"]) >= 1
    for a, b in zip(losses["halo"], losses["full"], strict=True):
        assert abs(a - b) <= 1e-5 * abs(b), losses
    assert int(_metrics(halo_runs["float32"])[-1]["bytes_exchanged"]) > 0
    # The input standardisation, fitted from the ranks' owned rows, is the full graph's.
    full_scaler = json.loads((full_runs["float64"] / SCALER_FILE).read_text())
    halo_scaler = json.loads((halo_runs["float64"] / SCALER_FILE).read_text())
    assert halo_scaler["n_nodes"] == full_scaler["n_nodes"]
    assert halo_scaler["n_edges"] == full_scaler["n_edges"]
    for key in ("node_mean", "node_std", "edge_mean", "edge_std"):
        torch.testing.assert_close(
            torch.tensor(halo_scaler[key]), torch.tensor(full_scaler[key]), rtol=1e-12, atol=0
        )


def _two_host_run(path: Path, dataset) -> tuple[Path, dict[str, str]]:
    """The float64 three-step halo config and the environment of a run across the two test
    hosts (skips where they cannot be made); GLOO_SOCKET_IFNAME is left for partgnn to pick."""
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"two hosts cannot be made here: {reason}")
    env = child_env()
    env.pop("GLOO_SOCKET_IFNAME", None)
    return _three_step_config(path, dataset, "halo", "float64", "phi2"), env


@pytest.mark.slow
def test_halo_across_two_hosts_equals_full_mode(dataset, full_runs, tmp_path):
    """torchrun --nnodes 2 across two network namespaces joined by a veth pair (rate limited
    to 1 Gbit/s); partgnn picks gloo's interface itself (GLOO_SOCKET_IFNAME unset)."""
    config, env = _two_host_run(tmp_path / "hosts.yaml", dataset)
    with two_hosts(rate="1gbit") as hosts:
        processes = []
        for host in (0, 1):
            argv = hosts.torchrun(host, ["partgnn", "train", "--config", str(config)])
            with (tmp_path / f"host{host}.log").open("w") as log:
                processes.append(hosts.popen(host, argv, env=env, stdout=log, stderr=log))
        codes = []
        for process in processes:
            try:
                codes.append(process.wait(timeout=DEADLINE_S))
            except subprocess.TimeoutExpired:
                for other in processes:
                    other.kill()
                codes.append(None)
    logs = [(tmp_path / f"host{host}.log").read_text()[-2000:] for host in (0, 1)]
    assert codes == [0, 0], f"exit codes {codes}:\n" + "\n".join(logs)
    full, halo = _weights(full_runs["float64"]), _weights(config.with_suffix(""))
    worst = max(_relative(halo[k], full[k]) for k in full)
    assert worst <= 1e-9, f"float64 weights differ by {worst:.3g}"


@pytest.mark.slow
def test_halo_under_mpirun_across_two_hosts_equals_full_mode(dataset, full_runs, tmp_path):
    """mpirun (MPICH hydra, from the mpich wheel) on host 0 starts one rank per host; hydra
    reaches host 1 through tools/netns_rsh; rank 0 opens the rendezvous port and
    broadcasts it with mpi4py; gloo runs over the rate-limited veth link."""
    config, env = _two_host_run(tmp_path / "mpi.yaml", dataset)
    with two_hosts(rate="1gbit") as hosts:
        argv = hosts.mpiexec([sys.executable, "-m", "partgnn", "train", "--config", str(config)])
        done = subprocess.run(argv, env=hosts.mpi_env(env), capture_output=True, text=True,
                              timeout=DEADLINE_S)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    full, halo = _weights(full_runs["float64"]), _weights(config.with_suffix(""))
    worst = max(_relative(halo[k], full[k]) for k in full)
    assert worst <= 1e-9, f"float64 weights differ by {worst:.3g}"


@pytest.mark.slow
def test_target_pt_loss_in_halo_mode_equals_full_mode(dataset, full_runs, tmp_path):
    """With ``loss.target_pt`` each rank counts its owned edges of each kind at start and the
    graph group sums them, so the halo loss is still the full graph's; the non-target true
    edges left out change what is learned; naive sectors normalise by their own count."""
    loss = {"target_pt": 0.5, "nontarget_weight": 0.0}
    runs = {}
    for mode, shards in (("full", "phi1"), ("halo", "phi2"), ("naive", "phi2")):
        config = _three_step_config(tmp_path / f"{mode}.yaml", dataset, mode, "float64", shards)
        config.write_text(config.read_text() + f"loss: {json.dumps(loss)}\n")
        if mode == "full":
            context = init_distributed(device="cpu", timeout_s=60)
            try:
                Trainer(load_config(config), context).fit()
            finally:
                destroy_distributed(context)
        else:
            _train(2, config, tmp_path)
        runs[mode] = config.with_suffix("")
    full, halo = _weights(runs["full"]), _weights(runs["halo"])
    worst = max(_relative(halo[k], full[k]) for k in full)
    assert worst <= 1e-9, f"float64 weights differ by {worst:.3g}"
    for column in ("train_loss", "val_loss"):
        a, b = (float(_metrics(runs[m])[-1][column]) for m in ("halo", "full"))
        assert abs(a - b) <= 1e-12 * abs(b), (column, a, b)
    default = _weights(full_runs["float64"])
    assert max(_relative(full[k], default[k]) for k in full) > 1e-6
    naive_losses = [float(r["train_loss"]) for r in _metrics(runs["naive"])]
    assert naive_losses and all(0 < loss < 10 for loss in naive_losses), naive_losses


@pytest.mark.slow
def test_event_cache_does_not_change_halo_training(dataset, tmp_path):
    weights = {}
    for cache_mb in (0, 64):
        run_dir = tmp_path / f"cache-{cache_mb}"
        config = write_config(
            tmp_path / f"cache-{cache_mb}.yaml",
            mode="halo",
            data={"shards": str(dataset["phi2"]), "cache_mb": cache_mb},
            optim={"epochs": 2},
            run={"dir": str(run_dir), "dtype": "float32"},
        )
        _train(2, config, tmp_path)
        weights[cache_mb] = _weights(run_dir)
        cache = json.loads((run_dir / "summary.json").read_text())["event_cache"]
        if cache_mb:
            # 3 training + 1 validation events, each read once; every other access is a hit.
            assert cache["misses"] + cache["prefetched"] == 4 and cache["hits"] > 0, cache
        else:
            assert cache["hits"] == 0 and cache["cached_items"] == 0, cache
    for name, tensor in weights[0].items():
        assert torch.equal(weights[64][name], tensor), name


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["naive", "overlapping", "ddp"])
def test_naive_overlapping_and_ddp_runs_train(dataset, tmp_path, strategy):
    mode = strategy
    shards = dataset["phi2"]
    if strategy == "overlapping":
        # Sectors extended by steps + 1 = 4 hops: every owned edge sees its whole receptive field.
        shards = tmp_path / "phi2-margin4"
        write_shards(
            dataset["graphs"],
            shards,
            PartitionOptions(n_parts=2, method="phi", margin=4),
            progress=False,
        )
    run_dir = tmp_path / strategy
    config = write_config(
        tmp_path / f"{strategy}.yaml",
        mode=mode,
        data={"graphs": str(dataset["graphs"]), "shards": str(shards)},
        optim={"epochs": 8 if mode == "ddp" else 4, "lr": 0.01},
        run={"dir": str(run_dir), "dtype": "float32"},
    )
    _train(2, config, tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["mode"], summary["sector_margin"]) == (
        strategy,
        4 if strategy == "overlapping" else 0,
    )
    assert summary["mode_facts"]["loses_cut_edges"] == (strategy != "ddp")
    workload = summary["workload"]
    replicated = (workload["replicated_node_fraction"], workload["replicated_edge_fraction"])
    if strategy == "overlapping":
        # The margin is replicated work (no exchange); it scores the boundary edges.
        assert min(replicated) > 0.01, workload
        assert float(_metrics(run_dir)[-1]["val_boundary_efficiency"]) > 0.0
        assert float(_metrics(run_dir)[-1]["bytes_exchanged"]) == 0
    else:
        assert replicated == (0.0, 0.0)
    rows = _metrics(run_dir)
    losses = [float(r["train_loss"]) for r in rows]
    assert losses[-1] < losses[0], losses
    assert all(len(r["peak_memory_mb_per_rank"].split()) == 2 for r in rows)
    if strategy == "naive":
        # A naive sector never scores the edges that cross its boundary.
        assert float(rows[-1]["val_boundary_efficiency"]) == 0.0
        assert float(rows[-1]["bytes_exchanged"]) == 0


def test_wrong_world_size_fails_fast_with_one_line(dataset, tmp_path):
    config = write_config(
        tmp_path / "halo.yaml",
        mode="halo",
        data={"shards": str(dataset["phi2"])},
        run={"dir": str(tmp_path / "run"), "timeout_s": 600},
    )
    # The launcher's deadline (120 s) sits below the collective timeout (600 s): a rank that
    # waited for the timeout would be killed and have no exit status.
    results = launch(
        3, "partgnn", ["train", "--config", str(config)], workdir=tmp_path / "logs", timeout=120
    )
    for result in results:
        assert result.returncode == 2
        error = result.stderr.strip()
        assert error == (
            f"partgnn: error: {dataset['phi2']}: shards are for 2 ranks but the world size is 3 "
            "(re-partition with --parts 3 or launch 2 processes)"
        )
    assert not (tmp_path / "run").exists()


def test_bad_config_is_one_line_before_anything_starts(tmp_path):
    config = write_config(
        tmp_path / "bad.yaml", mode="full", data={"graphs": "g.h5"}, optim={"lr": -1.0}
    )
    done = run_command(
        [sys.executable, "-m", "partgnn", "train", "--config", str(config)],
        cwd=REPOSITORY,
        env=child_env(),
    )
    assert done.returncode == 2
    assert done.stderr.strip() == f"partgnn: error: {config}: optim.lr must be > 0 (got -1.0)"


def test_resume_reads_the_checkpoint_onto_the_cpu(dataset, tmp_path, monkeypatch):
    """Loading then puts the weights and AdamW's moments on the parameters' device and keeps
    AdamW's step counters on the CPU (on a GPU, counters there cost a host sync per parameter
    and step)."""
    config = load_config(
        write_config(
            tmp_path / "full.yaml",
            data={"graphs": str(dataset["graphs"])},
            optim={"max_steps": 2},
            run={"dir": str(tmp_path / "run")},
        )
    )
    devices = []
    load = training_checkpoint.load_checkpoint

    def recording_load(path, device, **kwargs):
        devices.append(str(device))
        return load(path, device, **kwargs)

    context = init_distributed(device="cpu", timeout_s=60)
    try:
        Trainer(config, context).fit()
        monkeypatch.setattr(training_checkpoint, "load_checkpoint", recording_load)
        resumed = Trainer(config, context)
        resumed.fit(resume=True)
    finally:
        destroy_distributed(context)
    assert devices == ["cpu"]
    states = list(resumed.optimizer.state.values())
    assert states and all(state["step"].device.type == "cpu" for state in states)
