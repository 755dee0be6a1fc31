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
