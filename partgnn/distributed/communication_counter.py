"""What halo exchanges moved: the bytes each rank sent and received, forward and backward, and
the time it spent blocked in them (a run's communication figures)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CommunicationCounter:
    """Bytes moved by halo exchanges: per direction, accumulated until :meth:`reset`.

    Recomputed forward passes (activation recomputation) exchange again and are counted again:
    the numbers are the traffic that really happened.

    Attributes:
        forward_exchanges: Forward exchanges run.
        backward_exchanges: Backward (reverse) exchanges run.
        forward_bytes_sent: Bytes this rank sent in forward exchanges.
        forward_bytes_received: Bytes it received in forward exchanges.
        backward_bytes_sent: Bytes it sent in backward exchanges.
        backward_bytes_received: Bytes it received in backward exchanges.
        blocked_seconds: Wall time this rank spent blocked in exchanges: a blocking exchange
            whole, a started one (hiding communication) from its
            :meth:`~partgnn.distributed.halo_exchange.PendingExchange.wait` on (on CUDA, the
            host's time only: the device waits on its stream).
    """

    forward_exchanges: int = 0
    backward_exchanges: int = 0
    forward_bytes_sent: int = 0
    forward_bytes_received: int = 0
    backward_bytes_sent: int = 0
    backward_bytes_received: int = 0
    blocked_seconds: float = field(default=0.0, compare=False)
    _history: list[tuple[str, int, int]] = field(default_factory=list, repr=False)

    def record(self, direction: str, bytes_sent: int, bytes_received: int) -> None:
        if direction == "forward":
            self.forward_exchanges += 1
            self.forward_bytes_sent += bytes_sent
            self.forward_bytes_received += bytes_received
        else:
            self.backward_exchanges += 1
            self.backward_bytes_sent += bytes_sent
            self.backward_bytes_received += bytes_received
        self._history.append((direction, bytes_sent, bytes_received))

    @property
    def bytes_sent(self) -> int:
        return self.forward_bytes_sent + self.backward_bytes_sent

    @property
    def bytes_received(self) -> int:
        return self.forward_bytes_received + self.backward_bytes_received

    @property
    def history(self) -> list[tuple[str, int, int]]:
        """``(direction, bytes sent, bytes received)`` of every exchange since the reset."""
        return list(self._history)

    def reset(self) -> None:
        self.__init__()

    def as_dict(self) -> dict[str, int]:
        return {
            "forward_exchanges": self.forward_exchanges,
            "backward_exchanges": self.backward_exchanges,
            "forward_bytes_sent": self.forward_bytes_sent,
            "forward_bytes_received": self.forward_bytes_received,
            "backward_bytes_sent": self.backward_bytes_sent,
            "backward_bytes_received": self.backward_bytes_received,
        }
