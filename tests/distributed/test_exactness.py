"""Proof of exactness in real processes: a partitioned Interaction Network equals the full graph.

For P = 1..4 ranks (gloo over loopback), partition methods metis / phi / phieta, float64 and
float32, with and without activation checkpointing (the lean model's: MLPs recomputed in the
backward pass, exchanges not), both transports, and with and without hiding communication (the
exchange in flight while the interior edges are computed, forward and backward): the owned-edge
logits, the loss and every parameter gradient (summed over ranks) equal a single-process full-graph
run within the issue's bounds (relative error <= 1e-10 in float64, <= 1e-5 in float32), and the
bytes the exchanges moved equal the plan's analytic number. Set PARTGNN_EXACTNESS_REPORT=FILE to
append the measured errors as markdown rows."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest
import torch

from partgnn.data.files.storage import GraphFile
from tests.distributed.partitioned_run import run_on_shards
from tests.distributed.reference import (
    DTYPES,
    TOLERANCE,
    build_model,
    edge_loss,
    relative_error,
)

METHODS = ("metis", "phi", "phieta")
STEPS = 4
HIDDEN = 16


@pytest.fixture(scope="module")
def reference(graphs_file: Path) -> dict:
    return _full_graph_reference(graphs_file, fused=False)


def _full_graph_reference(graphs_file: Path, *, fused: bool, reference_style: bool = False) -> dict:
    """Logits, loss and gradients of the single-process full-graph run, per (dtype,
    checkpointing)."""
    with GraphFile(graphs_file) as graphs:
        graph = graphs[0]
    results = {}
    for dtype_name, dtype in DTYPES.items():
        for checkpoint in (False, True):
            model = build_model(
                graph, dtype, checkpoint=checkpoint, fused=fused, reference_style=reference_style
            )
            logits = model(graph.x.to(dtype), graph.edge_index, graph.edge_attr.to(dtype))
            loss = edge_loss(logits, graph.y.to(dtype), graph.edge_index.shape[1])
            loss.backward()
            grads = {n: p.grad.clone() for n, p in model.named_parameters()}
            results[(dtype_name, checkpoint)] = (logits.detach(), loss.detach(), grads)
    return results


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_partitioned_run_equals_full_graph(graphs_file, reference, tmp_path, world_size):
    cases = set(
        itertools.product(METHODS, DTYPES, (False, True), ("all_to_all", "p2p"), (False, True))
    )
    ranks = run_on_shards(
        graphs_file, tmp_path, world_size, "tests.distributed.exactness_worker", METHODS, cases
    )
    _report(_compare(ranks, reference, world_size))


@pytest.mark.slow
def test_fused_partitioned_run_equals_fused_full_graph(graphs_file, tmp_path):
    """``model.fused`` on 2 ranks (METIS; checkpointing and communication hiding each on and off)
    equals the single-process full-graph run with the same fused kernel within the same bounds, and
    the kernel did run. (Against the *plain* full graph float32 differs by the kernel's own
    rounding, 1.6e-5 on this graph: tests/models compares the kernel with the plain ops.)"""
    reference = _full_graph_reference(graphs_file, fused=True)
    cases = set(
        itertools.product(("metis",), DTYPES, (False, True), ("all_to_all",), (False, True))
    )
    ranks = run_on_shards(
        graphs_file, tmp_path, 2, "tests.distributed.exactness_worker", ("metis",), cases,
        worker_args=("--fused", "--transports", "all_to_all"),
    )  # fmt: skip
    for rank in ranks:
        assert all(result["fused_kernel_loaded"] for result in rank.values())
    _compare(ranks, reference, 2)


@pytest.mark.slow
def test_compiled_fused_partitioned_run_equals_full_graph(graphs_file, reference, tmp_path):
    """``model.fused`` on the GPU's paths (LayerNorm + activation compiled by torch.compile,
    here inductor's C++; issue 49) on 2 ranks, float64, checkpointing and communication hiding each
    on and off, equals the plain single-process full-graph run within the float64 bound, and every
    variant was compiled (none fell back to op by op)."""
    cases = set(
        itertools.product(("metis",), ("float64",), (False, True), ("all_to_all",), (False, True))
    )
    ranks = run_on_shards(
        graphs_file, tmp_path, 2, "tests.distributed.exactness_worker", ("metis",), cases,
        worker_args=("--fused", "--gpu-kernel-paths", "--transports", "all_to_all",
                     "--dtypes", "float64"),
    )  # fmt: skip
    for rank in ranks:
        for result in rank.values():
            compiled, op_by_op = result["compiled_variants"]
            assert compiled > 0 and op_by_op == 0, result["compiled_variants"]
    _compare(ranks, reference, 2)


#: How far a partitioned float32 run of the reference-style model may be from float64, in
#: multiples of the full-graph float32 run's own distance: the edge encoder's gradient through
#: the graph's BatchNorm is noise-dominated in float32 (its error against float64 moves with
#: the order of the sums: 5e-6 to 4.6e-3 across the partitions, the full run's 1.2e-3, when
#: the node MLPs' first layer became one matmul; issue 49). A wrong halo or statistic is O(1).
FLOAT32_NOISE = 10
#: The least float32 distance :data:`FLOAT32_NOISE` multiplies: the full run's own error is
#: noise too, and can be small by chance (2.9e-6 on the realistic simulation's graph, where a
#: partitioned run was 4.3e-3 from float64 while equal to the full run in float64).
FLOAT32_NOISE_FLOOR = 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [2, 3])
def test_reference_style_partitioned_run_equals_full_graph(graphs_file, tmp_path, world_size):
    """The reference pipeline's architecture (BatchNorm with the whole graph's statistics,
    reduced over the group; the initial encodings exchanged once and concatenated at every
    step) on 2 and 3 ranks (METIS and phi sectors; checkpointing on and off; communication hiding
    asked for, which such a model computes without) equals the single-process full-graph run within
    the same bounds in float64. In float32 the single-process run itself is only within ~1e-3 of
    float64 (BatchNorm's backward subtracts means of the gradients): the bound there is
    :data:`FLOAT32_NOISE` times that run's own error (against float64; at least
    :data:`FLOAT32_NOISE_FLOOR`) instead of 1e-5."""
    reference = _full_graph_reference(graphs_file, fused=False, reference_style=True)
    float32_error = max(
        _errors(reference[("float32", checkpoint)], reference[("float64", checkpoint)])
        for checkpoint in (False, True)
    )
    assert float32_error < 1e-2, f"float32 is {float32_error:.2g} from float64: no bound"
    cases = set(
        itertools.product(("metis", "phi"), DTYPES, (False, True), ("all_to_all",), (False, True))
    )
    ranks = run_on_shards(
        graphs_file, tmp_path, world_size, "tests.distributed.exactness_worker", ("metis", "phi"),
        cases, worker_args=("--reference-style", "--transports", "all_to_all"),
    )  # fmt: skip
    tolerance = {**TOLERANCE, "float32": FLOAT32_NOISE * max(float32_error, FLOAT32_NOISE_FLOOR)}
    _compare(ranks, reference, world_size, initial_exchanges=1, tolerance=tolerance)


def _errors(result: tuple, reference: tuple) -> float:
    """The largest relative error of a full-graph result's logits, loss and gradients."""
    (logits, loss, grads), (ref_logits, ref_loss, ref_grads) = result, reference
    return max(
        relative_error(logits.double(), ref_logits),
        relative_error(loss.double(), ref_loss),
        *(relative_error(grads[name].double(), ref) for name, ref in ref_grads.items()),
    )


def _compare(
    ranks: list[dict],
    reference: dict,
    world_size: int,
    *,
    initial_exchanges: int = 0,
    tolerance: dict[str, float] = TOLERANCE,
) -> list[tuple]:
    """Asserts every rank's results equal the full-graph ``reference`` within ``tolerance``
    (per dtype); the report's rows.

    ``initial_exchanges``: exchanges of the initial encodings besides one per step and one
    before the head.
    """
    n_edges = next(iter(reference.values()))[0].shape[0]
    rows = []
    for key in ranks[0]:
        _, dtype_name, checkpoint, _, _ = key
        ref_logits, ref_loss, ref_grads = reference[(dtype_name, checkpoint)]
        logits = torch.full((n_edges,), float("nan"), dtype=ref_logits.dtype)
        counted = torch.zeros(n_edges, dtype=torch.long)
        for rank in ranks:
            result = rank[key]
            logits[result["edge_ids"]] = result["logits"]
            counted[result["edge_ids"]] += 1
        assert bool((counted == 1).all()), f"{key}: an edge is not counted exactly once"
        bound = tolerance[dtype_name]
        errors = {"logits": relative_error(logits, ref_logits)}
        errors["loss"] = relative_error(ranks[0][key]["loss"], ref_loss)
        errors["grads"] = max(
            relative_error(ranks[0][key]["grads"][name], ref) for name, ref in ref_grads.items()
        )
        for name, error in errors.items():
            assert error <= bound, f"{key}: {name} relative error {error:.3g} > {bound:.3g}"
        for rank in ranks[1:]:
            for name, grad in rank[key]["grads"].items():
                assert torch.equal(grad, ranks[0][key]["grads"][name]), "ranks disagree"
        itemsize = torch.finfo(DTYPES[dtype_name]).bits // 8
        # One exchange per step and one before the head. Checkpointing recomputes the MLPs in
        # the backward pass, never the exchanges.
        exchanges = STEPS + 1 + initial_exchanges
        forward_exchanges = exchanges if world_size > 1 else 0
        for rank in ranks:
            result = rank[key]
            counter = result["counter"]
            row_bytes = HIDDEN * itemsize
            assert counter["forward_exchanges"] == forward_exchanges
            assert counter["backward_exchanges"] == forward_exchanges
            assert (
                counter["forward_bytes_sent"] == forward_exchanges * result["rows_sent"] * row_bytes
            )
            assert counter["forward_bytes_received"] == (
                forward_exchanges * result["rows_received"] * row_bytes
            )
            assert counter["backward_bytes_sent"] == counter["backward_exchanges"] * (
                result["rows_received"] * row_bytes
            )
        rows.append((world_size, *key, errors))
    return rows


def _report(rows) -> None:
    path = os.environ.get("PARTGNN_EXACTNESS_REPORT")
    if not path:
        return
    with open(path, "a") as report:
        for world_size, method, dtype, checkpoint, transport, hide, errors in rows:
            report.write(
                f"| {world_size} | {method} | {dtype} | {'on' if checkpoint else 'off'} "
                f"| {transport}{' + hidden' if hide else ''} "
                f"| {errors['logits']:.2e} | {errors['loss']:.2e} "
                f"| {errors['grads']:.2e} |\n"
            )
