"""Shared fixtures: the real TrackML sample event and a tiny hand-made event."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from partgnn.data.event import Event
from partgnn.resources import trackml_sample_dir
from tests.subprocesses import mark_test_start

#: The real TrackML sample event, test data of the repository ($PARTGNN_TRACKML_SAMPLE wins).
SAMPLE_DEFAULT = Path(__file__).resolve().parent / "fixtures" / "trackml-sample"


#: The GPUs the test process was given (``None``: all); its child processes see none (below).
VISIBLE_GPUS = os.environ.get("CUDA_VISIBLE_DEVICES")
#: Whether this machine has a CUDA GPU for the tests marked ``cuda`` (asked before the variable
#: below hides them).
CUDA_AVAILABLE = torch.cuda.is_available()


def pytest_configure(config) -> None:
    """Child processes (ranks, commands) compute on the CPU, as the in-process references the
    tests compare them with do, also on a machine with GPUs: they see no GPU. Tests marked
    ``cuda`` give theirs :func:`gpu_env`."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # Two workers share the cores with the processes their tests start: one thread each,
        # or their OpenMP threads wait for cores (and spin) instead of computing.
        torch.set_num_threads(1)


def gpu_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the GPUs the test process was given visible again."""
    env = dict(env)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if VISIBLE_GPUS is not None:
        env["CUDA_VISIBLE_DEVICES"] = VISIBLE_GPUS
    return env


#: Test files whose tests the xdist workers share out one by one (the others go whole).
SPREAD_FILES = frozenset({"test_smoke.py"})


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``make test``'s workers (``--dist loadfile``) take a file's tests whole, so its module
    fixtures are made once, but the tests of :data:`SPREAD_FILES` one by one (the tools' smoke
    runs, long and independent); files in the order of their first test
    (:func:`pytest_collection_modifyitems`). Not ``--dist loadgroup`` with a group per file:
    with pytest 9.2 its groups are silently ignored (pytest-dev/pytest-xdist#1386) and a file's
    module fixtures were made on both workers."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    # xdist orders files by their number of tests (the most first) unless told not to: the
    # files of one long test (the soak, the wheel) came last and ran alone at the end.
    config.option.loadscopereorder = False

    class FilesWholeButSpread(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return nodeid if Path(path).name in SPREAD_FILES else path

    return FilesWholeButSpread(config, log)


def pytest_collection_modifyitems(config, items) -> None:
    """Tests marked ``heap_meter`` run first, then those marked ``slow``, then the others (the
    workers take files in this order: :func:`pytest_xdist_make_scheduler`). Heap meters first:
    glibc's ``mallinfo2``, which the heap meter calls after every op, walks every free chunk,
    and the heap of a long test session holds many (50 ms a call against 8 us on a fresh heap;
    those tests took 20-44 s late in the suite and 1.5-7 s alone). Slow ones next: the longest
    first, so that the two workers end together on short tests, not one of them on the
    soak while the other waits. Tests marked ``cuda`` are skipped on machines without a CUDA
    GPU."""
    items.sort(key=_start_order)  # stable: the order within a tier is kept
    if CUDA_AVAILABLE:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


def _start_order(item) -> int:
    return 0 if "heap_meter" in item.keywords else 1 if "slow" in item.keywords else 2


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    """Starts the clock that commands' deadlines keep below pytest's timeout, when pytest's
    starts (before the test's fixtures: :func:`tests.subprocesses.deadline_within_test`)."""
    mark_test_start(time.monotonic())


@pytest.fixture(scope="session")
def sample_dir() -> Path:
    found = trackml_sample_dir(SAMPLE_DEFAULT)
    if found is None:
        pytest.skip(f"TrackML sample not found at $PARTGNN_TRACKML_SAMPLE or {SAMPLE_DEFAULT}")
    return found


def make_tiny_event(event_id: int = 7) -> Event:
    """Two particles crossing the four pixel barrel layers, plus one noise hit."""
    radii = np.array([32.0, 72.0, 116.0, 172.0])
    phi = np.array([0.1, -2.0])
    xs, ys, zs, layers, pids = [], [], [], [], []
    for p, phi0 in enumerate(phi):
        for k, r in enumerate(radii):
            xs.append(r * np.cos(phi0))
            ys.append(r * np.sin(phi0))
            zs.append(0.5 * r)
            layers.append(2 * (k + 1))
            pids.append(p + 1)
    xs.append(0.0)
    ys.append(116.0)
    zs.append(-40.0)
    layers.append(6)
    pids.append(0)
    n = len(xs)
    hit_id = np.arange(1, n + 1)
    hits = pd.DataFrame(
        {
            "hit_id": hit_id,
            "x": xs,
            "y": ys,
            "z": zs,
            "volume_id": 8,
            "layer_id": layers,
            "module_id": 1,
        }
    )
    truth = pd.DataFrame(
        {
            "hit_id": hit_id,
            "particle_id": pids,
            "tx": xs,
            "ty": ys,
            "tz": zs,
            "tpx": 1.0,
            "tpy": 0.0,
            "tpz": 0.5,
            "weight": np.where(np.array(pids) > 0, 1.0 / 8, 0.0),
        }
    )
    particles = pd.DataFrame(
        {
            "particle_id": [1, 2],
            "particle_type": [211, -211],
            "vx": 0.0,
            "vy": 0.0,
            "vz": 0.0,
            "px": [np.cos(phi[0]), np.cos(phi[1])],
            "py": [np.sin(phi[0]), np.sin(phi[1])],
            "pz": 0.5,
            "q": [1, -1],
            "nhits": 4,
        }
    )
    return Event(event_id, hits, truth, particles, attrs={"source": "hand-made"}).normalized()


@pytest.fixture
def tiny_event() -> Event:
    return make_tiny_event()
