"""ReplayedExchange: a checkpointed region's recomputation gets the halo rows its forward pass
received, without exchanging again; the Interaction Network with checkpointing (regions of
steps) equals it without, exchanging STEPS + 1 times forward whatever it recomputes.

The exchanges here are one process's loop-back (halo rows are copies of owned rows); the
multi-process proof is tests/distributed/test_exactness.py.
"""

from __future__ import annotations

import pytest
import torch

from partgnn.models import chunk_size
from partgnn.models.compute_policy import ComputePolicy
from partgnn.models.interaction_network import InteractionNetwork
from partgnn.models.replayed_exchange import ReplayedExchange
from tests.models.test_chunked_edge_mlp import LoopbackExchange


class BlockingLoopback(LoopbackExchange):
    """``x_owned -> [x_owned; x_owned[send_index]]``, differentiable; counts its calls."""

    hides_communication = False

    def __call__(self, x_owned: torch.Tensor) -> torch.Tensor:
        self.log.append("exchange")
        return torch.cat([x_owned, x_owned[self.send_index]])


class AsyncLoopback(LoopbackExchange):
    hides_communication = True


def test_a_region_replays_what_its_forward_pass_received_in_order():
    inner = BlockingLoopback(torch.tensor([2, 0]), n_owned=3)
    replay = ReplayedExchange(inner, n_owned=3)
    first, second = torch.arange(6.0).reshape(3, 2), -torch.arange(6.0).reshape(3, 2)
    forward, recompute = replay.region()
    with forward:
        received = [replay(first), replay(second)]
    assert inner.log == ["exchange", "exchange"]
    with recompute:
        # The inputs of a recomputation are equal to the forward pass's; the halo rows come
        # from the record even where they would not (here: zeros).
        replayed = [replay(torch.zeros(3, 2)), replay(torch.zeros(3, 2))]
        with pytest.raises(RuntimeError, match="exchanges more than it did"):
            replay(first)
    assert inner.log == ["exchange", "exchange"]
    for got, expected in zip(replayed, received, strict=True):
        torch.testing.assert_close(got[3:], expected[3:], rtol=0, atol=0)
        assert torch.count_nonzero(got[:3]) == 0


def test_outside_a_region_it_only_exchanges():
    inner = BlockingLoopback(torch.tensor([1]), n_owned=2)
    replay = ReplayedExchange(inner, n_owned=2)
    replay(torch.ones(2, 1))
    _, recompute = replay.region()
    with recompute, pytest.raises(RuntimeError):
        replay(torch.ones(2, 1))


def test_started_exchanges_are_recorded_when_they_arrive_and_replayed_without_starting():
    inner = AsyncLoopback(torch.tensor([1, 0]), n_owned=2)
    replay = ReplayedExchange(inner, n_owned=2)
    x = torch.tensor([[1.0], [2.0]])
    forward, recompute = replay.region()
    with forward:
        rows = replay.start(x).wait()
    with recompute:
        again = replay.start(torch.zeros(2, 1)).wait()
    assert inner.log == ["start", "wait"]
    torch.testing.assert_close(again, rows, rtol=0, atol=0)
    torch.testing.assert_close(rows, torch.tensor([[2.0], [1.0]]), rtol=0, atol=0)


def _partition(seed: int = 0):
    """30 owned nodes and 8 halo copies of owned nodes; edges among all 38."""
    generator = torch.Generator().manual_seed(seed)
    n_owned, n_halo = 30, 8
    send_index = torch.randperm(n_owned, generator=generator)[:n_halo]
    x = torch.randn(n_owned + n_halo, 3, generator=generator, dtype=torch.float64)
    edge_index = torch.randint(0, n_owned + n_halo, (2, 600), generator=generator)
    edge_attr = torch.randn(600, 4, generator=generator, dtype=torch.float64)
    return send_index, n_owned, (x, edge_index, edge_attr)


@pytest.mark.parametrize("exchange_kind", [BlockingLoopback, AsyncLoopback])
@pytest.mark.parametrize("steps", [4, 5])
def test_checkpointed_regions_equal_no_checkpointing_and_never_exchange_again(
    monkeypatch, exchange_kind, steps
):
    monkeypatch.setattr(chunk_size, "MIN_CHUNK_EDGES", 64)
    send_index, n_owned, graph = _partition()
    results = {}
    for checkpoint in (False, True):
        torch.manual_seed(3)
        model = InteractionNetwork(
            node_features=3, edge_features=4, hidden=8, steps=steps, activation="silu",
            shared_weights=False, compute=ComputePolicy(recompute=checkpoint),
        ).double()  # fmt: skip
        exchange = exchange_kind(send_index, n_owned)
        logits = model(*graph, exchange=exchange)
        forward_log = list(exchange.log)
        (logits.sin() * 3).sum().backward()
        grads = {name: p.grad for name, p in model.named_parameters()}
        results[checkpoint] = logits.detach(), grads, forward_log, exchange.log
    (logits_off, grads_off, forward_off, _), (logits_on, grads_on, forward_on, log_on) = (
        results[False],
        results[True],
    )
    torch.testing.assert_close(logits_on, logits_off, rtol=1e-12, atol=1e-12)
    for name, grad in grads_on.items():
        torch.testing.assert_close(grad, grads_off[name], rtol=1e-10, atol=1e-11, msg=name)
    started = "exchange" if exchange_kind is BlockingLoopback else "start"
    assert forward_on.count(started) == forward_off.count(started) == steps + 1
    assert log_on.count(started) == steps + 1  # the backward pass recomputed, not exchanged
