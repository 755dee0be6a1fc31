"""Gradients reduced bucket by bucket during the backward pass equal those reduced after it
(real processes on gloo: one graph group, and two graph groups as data-parallel replicas)."""

from __future__ import annotations

import pytest
import torch

from tests.distributed.launch import assert_all_succeeded, launch


@pytest.mark.parametrize(("world_size", "group_size"), [(2, 2), (4, 2)])
def test_bucketed_reduce_equals_reduce_after_backward(tmp_path, world_size, group_size):
    out = tmp_path / "grads"
    results = launch(
        world_size,
        "tests.distributed.gradients_worker",
        [str(out), str(group_size)],
        workdir=tmp_path,
    )
    assert_all_succeeded(results)
    ranks = [torch.load(f"{out}.rank{r}", weights_only=True) for r in range(world_size)]
    assert ranks[0]["buckets"] >= 3
    # All but the first layer's bucket (its gradient is final last) left during the pass.
    assert all(rank["launched_in_backward"] >= rank["buckets"] - 2 for rank in ranks)
    for rank in ranks:
        for name, grad in rank["after"].items():
            torch.testing.assert_close(rank["bucketed"][name], grad, rtol=1e-14, atol=0)
            # Every rank ends with the same (reduced) gradient.
            assert torch.equal(rank["bucketed"][name], ranks[0]["bucketed"][name]), name
        assert not rank["bucketed"]["unused.weight"].any()
    # One all-reduce tells every rank the stop signal and who saw what not finite.
    replicas = world_size // group_size
    expected_loss = sum(range(world_size)) / replicas  # summed in each group, groups averaged
    problems = [(1, "loss"), (world_size - 1, "gradient")]
    for rank in ranks:
        loss, flag, non_finite = rank["step"]
        assert loss == pytest.approx(expected_loss) and flag == 15
        assert non_finite == problems


def test_gradient_buckets_are_larger_on_nccl():
    from partgnn.distributed.gradients import BUCKET_BYTES, BUCKET_BYTES_CUDA, bucket_bytes_for

    assert bucket_bytes_for(torch.device("cpu")) == BUCKET_BYTES
    assert bucket_bytes_for(torch.device("cuda", 0)) == BUCKET_BYTES_CUDA > BUCKET_BYTES
