"""The halo exchange on hand-made plans, in real processes, and its single-process pieces."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from partgnn.distributed.context import DistContext
from partgnn.distributed.exchange_plan import AUTO_P2P_MIN_RANKS, ExchangePlan, resolve_transport
from partgnn.distributed.halo_exchange import HaloExchanger, halo_exchange
from partgnn.partition.halo_plan import build_halo_plans
from tests.distributed.exchange_worker import CASES, case_name, scenarios
from tests.distributed.launch import assert_all_succeeded, launch


@pytest.mark.parametrize("world_size", [2, 4])
def test_exchange_forward_and_backward_with_empty_parts(tmp_path, world_size):
    results = launch(world_size, "tests.distributed.exchange_worker", [], workdir=tmp_path)
    assert_all_succeeded(results)
    cases = {
        f"checked: {case_name(name, transport, staged)}"
        for name in scenarios(world_size)
        for transport, staged in CASES
    }
    cases.add("checked: blocked time")
    for result in results:
        assert set(result.stdout.splitlines()) == cases, f"rank {result.rank}: {result.stdout}"


def test_one_rank_is_the_identity_without_communication():
    context = DistContext.one_process("cpu")
    x = torch.randn(5, 3, requires_grad=True)
    out = HaloExchanger(ExchangePlan.single(5), context)(x)
    assert out is x


def test_plan_from_halo_plan_and_argument_checks():
    plans = build_halo_plans(np.array([[0, 1], [1, 2]]), np.array([0, 0, 1]), 2)
    plan = ExchangePlan.from_halo_plan(plans[0])
    assert (plan.n_owned, plan.n_halo, plan.rows_sent) == (2, 1, 1)
    assert plan.send_counts == (0, 1) and plan.recv_counts == (0, 1) and plan.peers == (1,)
    context = DistContext(group_rank=0, group_size=2, group=None, device=torch.device("cpu"))
    with pytest.raises(ValueError, match="x_owned has 3 rows, the plan owns 2"):
        halo_exchange(torch.zeros(3, 4), plan, context)
    with pytest.raises(ValueError, match="plan is for 2 ranks, the group has 1"):
        halo_exchange(torch.zeros(2, 4), plan, DistContext.one_process("cpu"))


def test_auto_transport_depends_only_on_group_size():
    assert resolve_transport("auto", AUTO_P2P_MIN_RANKS - 1) == "all_to_all"
    assert resolve_transport("auto", AUTO_P2P_MIN_RANKS) == "p2p"
    assert resolve_transport("p2p", 2) == "p2p"
    with pytest.raises(ValueError, match="unknown transport"):
        resolve_transport("carrier-pigeon", 2)
