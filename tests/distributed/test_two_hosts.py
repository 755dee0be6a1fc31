"""The two test hosts (network namespaces joined by a veth pair) and gloo's interface choice.

Training across them is tests/train/test_trainer.py::test_halo_across_two_hosts_equals_full_mode.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from partgnn.distributed.rendezvous import interface_towards
from tests.distributed.launch import child_env
from tools._two_hosts import two_hosts, unavailable_reason


def test_loopback_needs_no_interface():
    assert interface_towards("127.0.0.1") is None
    assert interface_towards("localhost") is None
    assert interface_towards("no-such-host.invalid") is None


def test_each_host_reaches_the_other_through_its_veth_end():
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"two hosts cannot be made here: {reason}")
    with two_hosts(rate="10gbit") as hosts:
        for host in (0, 1):
            other = hosts.addresses[1 - host]
            code = (
                "from partgnn.distributed.rendezvous import interface_towards as f; "
                f"print(f({other!r}), f({hosts.addresses[host]!r}))"
            )
            done = subprocess.run(
                hosts.command(host, [sys.executable, "-c", code]),
                env=child_env(),
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            )
            # Towards the peer and towards its own address: the veth end either way.
            assert done.stdout.split() == [hosts.interfaces[host]] * 2
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    assert not any(name in left.stdout for name in hosts.namespaces), "namespaces left behind"
