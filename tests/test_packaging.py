"""partgnn as a user installs it: a wheel, in a fresh venv, run from a folder outside the checkout.

The wheel is built from a copy of the source tree and installed with ``--no-deps`` into a new
venv; the heavy dependencies (torch, PyG, ...) are borrowed from the test's own environment
through a ``.pth`` line appended *after* the venv's site-packages, so the ``partgnn`` that runs
is the wheel's (asserted), while torch need not be downloaded again. The checkout is never on
``sys.path`` and the TrackML sample is not named, so any run-time read of the source tree (its
test data among it) fails the pipeline.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[1]
#: Not copied into the wheel's build tree: environments, caches, benchmark output.
_NOT_SOURCE = shutil.ignore_patterns(
    ".git",
    ".venv",
    "bench-*",
    "demo-output",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".*cache",
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of the current source tree."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    shutil.copytree(REPOSITORY, source, ignore=_NOT_SOURCE)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(root / "dist"), str(source)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    (built,) = (root / "dist").glob("partgnn-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed; returns its ``bin`` folder."""
    venv = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
        check=True,
        capture_output=True,
    )
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # The dependencies of this environment, after the venv's own packages.
    (Path(site) / "zz_borrowed_dependencies.pth").write_text(sysconfig.get_paths()["purelib"])
    return venv / "bin"


def test_the_wheel_carries_configs_geometry_kernel_sources_and_trained_models(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "partgnn/configs/detector/trackml.yaml" in names
    kernels = {f"partgnn/models/kernels/{name}.cpp" for name in ("norm_activation", "node_sums")}
    assert kernels <= names
    for model in ("trackml-pt1", "trackml-full", "trackml-full-positions"):
        assert {f"partgnn/pretrained/{model}.pt", f"partgnn/pretrained/{model}.yaml"} <= names
    assert "partgnn/pretrained/trackml-full.map.npz" in names  # its module map: no fit needed
    assert {"partgnn/configs/demo.yaml", "partgnn/configs/halo.yaml"} <= names
    assert not any(name.startswith(("tests/", "tools/")) for name in names)


@pytest.mark.slow
def test_the_pipeline_runs_from_the_wheel_outside_the_checkout(installed: Path, tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PARTGNN_"))}
    env.update(OMP_NUM_THREADS="1", PATH=f"{installed}{os.pathsep}{env.get('PATH', '')}")
    work = tmp_path / "work"
    work.mkdir()

    def partgnn(*arguments: str, launcher: tuple[str, ...] = ()) -> str:
        command = [
            *launcher,
            *(arguments if launcher else (str(installed / "partgnn"), *arguments)),
        ]
        done = subprocess.run(
            command, cwd=work, env=env, capture_output=True, text=True, timeout=240
        )
        assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout}\n{done.stderr}"
        assert "Warning" not in done.stderr, done.stderr
        return done.stdout

    where = partgnn("configs")  # also: the command works with nothing but the wheel
    assert "halo" in where
    located = subprocess.run(
        [str(installed / "python"), "-c", "import partgnn; print(partgnn.__file__)"],
        cwd=work, env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert Path(located).resolve().is_relative_to(installed.parent.resolve()), located

    partgnn("simulate", "--events", "3", "--pileup", "5", "--seed", "2", "--out", "ev.h5")
    partgnn("build-graphs", "ev.h5", "--pt-min", "1.0", "--out", "g.h5")
    env["PARTGNN_CACHE"] = str(tmp_path / "empty-cache")  # nothing made on this machine
    built = partgnn("build-graphs", "ev.h5", "--method", "module-map", "--map",
                    "pretrained:trackml-full", "--out", "gm.h5")  # fmt: skip
    assert "built 3 graphs" in built and not (tmp_path / "empty-cache").exists()
    partgnn("partition", "g.h5", "--parts", "2", "--method", "phi", "--out", "s2")
    torchrun = (str(installed / "python"), "-m", "torch.distributed.run", "--standalone")
    overrides = [
        "data.shards=s2", "data.val_events=1", "optim.max_steps=2", "run.dir=run",
        "model.hidden=8", "model.steps=2", "run.progress=false", "run.tensorboard=false",
    ]  # fmt: skip
    partgnn(
        "--nproc-per-node", "2", "-m", "partgnn", "train", "--config", "halo",
        *(a for o in overrides for a in ("--set", o)),
        launcher=torchrun,
    )  # fmt: skip
    checkpoint = next((work / "run" / "checkpoints").glob("*.pt"))
    partgnn(
        "--nproc-per-node", "2", "-m", "partgnn", "infer", "--checkpoint", str(checkpoint),
        "--shards", "s2", "--out", "scores.h5",
        launcher=torchrun,
    )  # fmt: skip
    report = partgnn(
        "evaluate", "scores.h5", "--graphs", "g.h5", "--events", "ev.h5", "--shards", "s2"
    )
    assert "edge metrics" in report and "track metrics" in report
