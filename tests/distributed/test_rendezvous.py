"""The rendezvous address under MPI (the multi-process rendezvous: test_process_group.py)."""

from __future__ import annotations

from partgnn.distributed import rendezvous


def test_routable_address_is_the_route_to_another_host():
    class TwoHosts:  # Stand-in for MPI.COMM_WORLD on rank 0 of a two-node job.
        def gather(self, value, root):
            return [value, "127.0.0.1"]

        def Get_rank(self):
            return 0

    assert rendezvous._routable_address(TwoHosts()) == "127.0.0.1"


def test_each_backend_is_pointed_at_the_interface_towards_the_rendezvous(monkeypatch):
    monkeypatch.setattr(rendezvous, "interface_towards", lambda address: "veth-a")
    variables = rendezvous.socket_interface_variables
    assert variables("gloo", "10.0.0.1", {}) == {"GLOO_SOCKET_IFNAME": "veth-a"}
    assert variables("nccl", "10.0.0.1", {}) == {"NCCL_SOCKET_IFNAME": "veth-a"}
    # The user's choice stands; no host, or another backend: nothing to set.
    assert variables("nccl", "10.0.0.1", {"NCCL_SOCKET_IFNAME": "ib0"}) == {}
    assert variables("gloo", None, {}) == {}
    assert variables("mpi", "10.0.0.1", {}) == {}


def test_a_loopback_rendezvous_sets_no_interface():
    assert rendezvous.socket_interface_variables("nccl", "127.0.0.1", {}) == {}
