"""Tests of partgnn.workflows.selfcheck as a library call: on one process the partitioned and the
whole graph are the same computation, and the record says whether errors pass (the check under
torchrun and mpirun on several ranks: tests/cli/test_selfcheck.py)."""

from __future__ import annotations

import partgnn
from partgnn.workflows.selfcheck import TOLERANCE, SelfcheckResult


def test_the_api_checks_one_process_and_returns_a_record():
    context = partgnn.init_distributed(device="cpu", timeout_s=60)
    try:
        result = partgnn.selfcheck(context, method="metis")
    finally:
        partgnn.destroy_distributed(context)
    assert isinstance(result, SelfcheckResult)
    assert (result.ranks, result.method, result.tolerance) == (1, "metis", TOLERANCE)
    assert result.logits_error <= TOLERANCE and result.gradients_error <= TOLERANCE
    assert result.ok


def test_an_error_past_the_tolerance_fails():
    assert not SelfcheckResult(2, "metis", logits_error=0.0, gradients_error=1e-6).ok
    assert not SelfcheckResult(2, "metis", logits_error=1e-9, gradients_error=0.0).ok
    assert SelfcheckResult(2, "metis", logits_error=TOLERANCE, gradients_error=0.0).ok
