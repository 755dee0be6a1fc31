"""What a halo exchange moves (:mod:`partgnn.distributed.halo_exchange`): a rank's
:class:`ExchangePlan` (the owned rows each peer needs, the halo rows each peer sends, on the
device), and the transports that move them (``all_to_all``: one collective of the whole group;
``p2p``: sends and receives with the neighbour ranks only; ``auto``: by the group's size)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import torch

from partgnn.partition.halo_plan import HaloPlan

#: How the rows move between the ranks of a graph group.
Transport = Literal["auto", "all_to_all", "p2p"]
TRANSPORTS: tuple[str, ...] = get_args(Transport)

#: With ``transport="auto"``, groups larger than this use point-to-point.
AUTO_P2P_MIN_RANKS = 5


@dataclass(frozen=True, eq=False)
class ExchangePlan:
    """A rank's exchange lists, on its device, built once per event and reused every step.

    Attributes:
        n_owned: Owned nodes of this rank.
        n_halo: Halo nodes of this rank (rows received per exchange).
        send_index: Local indices of the owned rows to send, grouped by peer, shape ``(S,)``.
        send_counts: Rows sent to each peer, length ``P``.
        recv_counts: Rows received from each peer, length ``P``.
    """

    n_owned: int
    n_halo: int
    send_index: torch.Tensor
    send_counts: tuple[int, ...]
    recv_counts: tuple[int, ...]

    @classmethod
    def from_halo_plan(cls, plan: HaloPlan, device: torch.device | str = "cpu") -> ExchangePlan:
        """Moves a halo plan's exchange lists to ``device``."""
        return cls(
            n_owned=plan.n_owned,
            n_halo=plan.n_halo,
            send_index=torch.as_tensor(plan.send_index, dtype=torch.long, device=device),
            send_counts=tuple(int(c) for c in plan.send_counts),
            recv_counts=tuple(int(c) for c in plan.recv_counts),
        )

    @classmethod
    def single(cls, n_nodes: int, device: torch.device | str = "cpu") -> ExchangePlan:
        """The plan of a whole graph on one rank: nothing to exchange."""
        empty = torch.zeros(0, dtype=torch.long, device=device)
        return cls(n_owned=n_nodes, n_halo=0, send_index=empty, send_counts=(0,), recv_counts=(0,))

    @property
    def n_parts(self) -> int:
        return len(self.send_counts)

    @property
    def rows_sent(self) -> int:
        return int(self.send_index.shape[0])

    @property
    def peers(self) -> tuple[int, ...]:
        """Ranks this rank sends to or receives from."""
        return tuple(
            peer
            for peer, (s, r) in enumerate(zip(self.send_counts, self.recv_counts, strict=True))
            if s or r
        )


def resolve_transport(transport: str, group_size: int) -> str:
    """The concrete transport for ``transport`` in a graph group of ``group_size`` ranks.

    ``"auto"`` depends only on ``group_size``, so every rank of a group makes the same choice.
    """
    if transport not in TRANSPORTS:
        raise ValueError(f"unknown transport {transport!r} (choose {', '.join(TRANSPORTS)})")
    if transport == "auto":
        return "p2p" if group_size >= AUTO_P2P_MIN_RANKS else "all_to_all"
    return transport
