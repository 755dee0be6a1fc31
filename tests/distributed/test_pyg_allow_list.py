"""Proof in real processes that every allow-listed PyG layer is exact on partitions.

For P = 3 and 5 ranks (gloo over loopback), partition methods metis and phi, float64: each case
of tests/distributed/pyg_allow_list_worker.py (every class of
``partgnn.models.pyg_support.EXACT_LAYERS``, with the inputs it takes, pos and normal exchanged
by the wrapper) gives owned-node outputs (assembled by global node id), a loss and parameter
gradients (summed over the ranks) equal to the bare layer on the whole graph in one process:
relative error <= 1e-10. One launch per P. Set PARTGNN_PYG_EXACTNESS_REPORT=FILE to append the
worst error per layer as markdown rows (the table of docs/history/distributed.md).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from partgnn.data.files.storage import GraphFile
from tests.distributed.partitioned_run import run_on_shards
from tests.distributed.pyg_allow_list_worker import CASES, build_case
from tests.distributed.pyg_layer_worker import node_loss
from tests.distributed.reference import TOLERANCE, relative_error

METHODS = ("metis", "phi")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reference(graphs_file: Path) -> dict:
    """Outputs, loss and gradients of every case with the bare layer on the whole graph."""
    with GraphFile(graphs_file) as graphs:
        graph = graphs[0]
    results = {}
    for name in CASES:
        model = build_case(name)
        out = model(graph.x.double(), graph.edge_index, graph.edge_attr.double(), bare=True)
        loss = node_loss(out)
        loss.backward()
        grads = {
            key: torch.zeros_like(p) if p.grad is None else p.grad.clone()
            for key, p in model.named_parameters()
        }
        results[name] = (out.detach(), loss.detach(), grads)
    return results


@pytest.mark.parametrize("world_size", [3, 5])
def test_allow_listed_layers_on_partitions_equal_full_graph(
    graphs_file, reference, tmp_path, world_size
):
    ranks = run_on_shards(
        graphs_file, tmp_path, world_size, "tests.distributed.pyg_allow_list_worker", METHODS,
        {(method, name) for method in METHODS for name in CASES},
    )  # fmt: skip
    tolerance = TOLERANCE["float64"]
    failures, rows = [], []
    for method, name in ranks[0]:
        key = (method, name)
        ref_out, ref_loss, ref_grads = reference[name]
        out = torch.full_like(ref_out, float("nan"))
        for rank in ranks:
            out[rank[key]["nodes"]] = rank[key]["out"]
        errors = {
            "out": relative_error(out, ref_out),
            "loss": relative_error(ranks[0][key]["loss"], ref_loss),
            "grads": gradient_error(ranks[0][key]["grads"], ref_grads),
        }
        failures += [
            f"{key}: {what} {error:.3g}" for what, error in errors.items() if not error <= tolerance
        ]
        for rank in ranks[1:]:
            for g, grad in rank[key]["grads"].items():
                if not torch.equal(grad, ranks[0][key]["grads"][g]):
                    failures.append(f"{key}: ranks disagree on the gradient of {g}")
        rows.append((world_size, method, name, errors))
    _report(rows)
    assert not failures, "relative errors above 1e-10:\n" + "\n".join(failures)


def gradient_error(grads: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> float:
    """The worst relative error of the parameter gradients.

    Relative to each parameter's own gradient, except for gradients that are zero in exact
    arithmetic (norm below 1e-12 of the whole gradient's, e.g. a key bias under a softmax,
    which shifts every score of a node alike): those are compared with the whole gradient's norm.
    """
    assert set(grads) == set(reference)
    total = torch.cat([g.flatten() for g in reference.values()]).norm() if reference else 0.0
    worst = 0.0
    for name, ref in reference.items():
        scale = ref.norm() if ref.norm() > 1e-12 * total else total
        if scale > 0:
            worst = max(worst, float((grads[name] - ref).norm() / scale))
    return worst


def _report(rows) -> None:
    path = os.environ.get("PARTGNN_PYG_EXACTNESS_REPORT")
    if not path:
        return
    with open(path, "a") as report:
        for world_size, method, name, errors in rows:
            report.write(
                f"| {name} | {world_size} | {method} | {errors['out']:.1e} "
                f"| {errors['loss']:.1e} | {errors['grads']:.1e} |\n"
            )
