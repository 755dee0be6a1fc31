"""One rank of the halo-exchange checks on hand-made plans (empty parts, zero-size sends).

For each scenario (a global graph and an assignment to this world size) and each transport,
directly and staged through host copies (as ranks on a GPU over gloo exchange), the forward
(blocking and started) must give exactly the global rows of the rank's local nodes, and the
backward of ``sum(out * w[local_nodes])`` must give each owned node ``w[v]`` times the number
of ranks that hold ``v`` (as owner or halo). Exits non-zero with a message on the first
mismatch; prints ``checked: <scenario>, <transport>[, staged]`` for every case it checked.
Last, the time a rank is blocked in exchanges (``CommunicationCounter.blocked_seconds``) while
the last rank is late by :data:`LATE_S`: blocking and started exchanges,
``checked: blocked time``.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import torch

from partgnn.distributed.communication_counter import CommunicationCounter
from partgnn.distributed.exchange_plan import ExchangePlan
from partgnn.distributed.halo_exchange import HaloExchanger, halo_exchange
from partgnn.distributed.process_group import destroy_distributed, init_distributed
from partgnn.partition.halo_plan import build_halo_plans

PATH = np.array([[0, 1, 2, 3, 1], [1, 2, 3, 0, 3]])
TRANSPORTS = ("all_to_all", "p2p")
#: (transport, staged through host memory) pairs checked on every scenario.
CASES = [(transport, staged) for transport in TRANSPORTS for staged in (False, True)]
#: The last rank starts its exchanges this late in the blocked-time check.
LATE_S = 0.3


def scenarios(world_size: int) -> dict[str, np.ndarray]:
    """Assignments of the 4-node graph PATH to ``world_size`` parts."""
    last = world_size - 1
    return {
        "round robin": np.arange(4) % world_size,
        "all on the last rank": np.full(4, last),
        "first and last only": np.array([0, 0, last, last]),
    }


def case_name(scenario: str, transport: str, staged: bool) -> str:
    """The name a case is printed under."""
    return f"{scenario}, {transport}{', staged' if staged else ''}"


def main() -> None:
    context = init_distributed(device="cpu", timeout_s=60)
    generator = torch.Generator().manual_seed(5)
    features = torch.randn(4, 3, 2, generator=generator, dtype=torch.float64)
    weights = torch.randn(4, 3, 2, generator=generator, dtype=torch.float64)
    for name, assignment in scenarios(context.group_size).items():
        plans = build_halo_plans(PATH, assignment, context.group_size)
        plan = plans[context.group_rank]
        holders = np.zeros(4)
        for other in plans:
            holders[other.local_nodes] += 1
        local = torch.from_numpy(plan.local_nodes)
        owned = torch.from_numpy(plan.owned_nodes)
        for transport, staged in CASES:
            # Staged: through host copies, as ranks computing on a GPU over gloo exchange.
            case_context = dataclasses.replace(context, host_staging=staged)
            counter = CommunicationCounter()
            x = features[owned].clone().requires_grad_(True)
            out = halo_exchange(
                x,
                ExchangePlan.from_halo_plan(plan),
                case_context,
                transport=transport,
                counter=counter,
            )
            where = f"{name}, {transport}{', staged' if staged else ''}, rank {context.group_rank}"
            if not torch.equal(out.detach(), features[local]):
                raise SystemExit(f"{where}: forward rows differ from the global rows")
            (out * weights[local]).sum().backward()
            expected = weights[owned] * torch.from_numpy(holders[plan.owned_nodes]).view(-1, 1, 1)
            if not torch.allclose(x.grad, expected, rtol=0, atol=1e-14):
                raise SystemExit(f"{where}: backward gradient differs")
            row_bytes = 3 * 2 * 8
            if context.group_size > 1 and (
                counter.forward_bytes_sent != plan.send_index.size * row_bytes
                or counter.backward_bytes_sent != plan.n_halo * row_bytes
            ):
                raise SystemExit(f"{where}: byte count {counter.as_dict()}")
            exchanger = HaloExchanger(
                ExchangePlan.from_halo_plan(plan),
                case_context,
                transport=transport,
                hide_communication=True,
            )
            halo = local[plan.n_owned :]
            if not torch.equal(exchanger.start(features[owned]).wait(), features[halo]):
                raise SystemExit(f"{where}: started exchange's rows differ from the global rows")
            print(f"checked: {case_name(name, transport, staged)}", flush=True)
    if context.group_size > 1:
        round_robin = build_halo_plans(PATH, np.arange(4) % context.group_size, context.group_size)
        _check_blocked_time(context, ExchangePlan.from_halo_plan(round_robin[context.group_rank]))
    destroy_distributed(context)


def _check_blocked_time(context, plan: ExchangePlan) -> None:
    """Every rank but the late one waits for it, in a blocking and in a started exchange
    (all_to_all: every rank takes part)."""
    late = context.group_rank == context.group_size - 1
    for kind in ("blocking", "started"):
        counter = CommunicationCounter()
        x = torch.zeros(plan.n_owned, 4)
        if late:
            time.sleep(LATE_S)
        if kind == "blocking":
            halo_exchange(x, plan, context, transport="all_to_all", counter=counter)
        else:
            exchanger = HaloExchanger(
                plan, context, transport="all_to_all", counter=counter, hide_communication=True
            )
            exchanger.start(x).wait()
        blocked = counter.blocked_seconds
        if late and blocked >= LATE_S:
            raise SystemExit(f"{kind}: the late rank was blocked {blocked:.3f} s")
        if not late and blocked < LATE_S - 0.05:
            raise SystemExit(f"{kind}: rank {context.group_rank} was blocked {blocked:.3f} s only")
    print("checked: blocked time", flush=True)


if __name__ == "__main__":
    main()
