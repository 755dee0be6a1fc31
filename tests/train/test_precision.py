"""``run.bf16: auto``: bf16 where the device computes it natively, float32 elsewhere; an
explicit ``true`` where bf16 is emulated is kept and said. A CPU without native bf16 is this
machine with torch dispatching as on an AVX2 CPU (``ATEN_CPU_CAPABILITY=avx2``, a process of
its own: the dispatch is chosen when torch loads)."""

from __future__ import annotations

import json
import subprocess
import sys

import torch

from partgnn.train.config.config_file import load_config
from partgnn.train.precision import bf16_notice, native_bf16, resolve_bf16
from partgnn.train.step import StepSettings

PROBE = """
import json, torch
from partgnn.train.precision import bf16_notice, native_bf16, resolve_bf16
cpu = torch.device("cpu")
print(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(),
                  "native": native_bf16(cpu), "auto": resolve_bf16("auto", cpu),
                  "notice": bf16_notice(True, cpu)}))
"""


def _probe(env: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                          text=True, check=True, timeout=120)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_auto_is_float32_where_the_cpu_has_no_native_bf16(monkeypatch):
    import os

    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2"}
    avx2 = _probe(env)
    assert avx2["capability"] == "AVX2" and not avx2["native"] and avx2["auto"] is False
    assert avx2["notice"].startswith("run.bf16 is true on a CPU without native bf16 (torch "
                                     "dispatches AVX2): bf16 products are emulated")  # fmt: skip
    here = _probe(dict(os.environ))
    assert here["auto"] == here["native"]
    assert (here["notice"] is None) == here["native"]


def test_explicit_settings_are_kept_and_the_step_resolves_auto():
    cpu = torch.device("cpu")
    assert resolve_bf16(True, cpu) is True and resolve_bf16(False, cpu) is False
    assert bf16_notice(False, cpu) is None and bf16_notice("auto", cpu) is None
    config = load_config(None, ["run.bf16=auto", "data.graphs=g.h5"])
    assert config.run.bf16 == "auto"
    assert StepSettings.of(config, cpu).bf16 == native_bf16(cpu)
    assert load_config("recipe").run.bf16 == load_config("full-recipe").run.bf16 == "auto"
