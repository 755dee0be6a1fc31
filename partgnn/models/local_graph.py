"""The local graph one forward pass of the Interaction Network
(:mod:`partgnn.models.interaction_network`) runs on: its edges, how a step gets the halo rows
(exchanged inside the edge MLP, hiding the communication, or before it), the edges listed by
node for the sums into nodes, and, with recomputation, the regions of steps whose edge MLPs hand
their kept autograd graphs from the recomputation to the forward pass
(:class:`~partgnn.models.edge_chunks.KeptGraphs`)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager

import torch

from partgnn.distributed.exchange import Exchange
from partgnn.models.chunked_edge_mlp import EdgeNodes
from partgnn.models.edge_chunks import KeptGraphs
from partgnn.models.node_sums import Incidence


def joined_regions(sources: list) -> tuple[AbstractContextManager, AbstractContextManager]:
    """One recomputed region's contexts from several sources' ``region()``: each replays
    what its forward pass recorded."""
    pairs = [source.region() for source in sources]
    return _all_of([p[0] for p in pairs]), _all_of([p[1] for p in pairs])


@contextmanager
def _all_of(contexts: list[AbstractContextManager]) -> Iterator[None]:
    with ExitStack() as stack:
        for context in contexts:
            stack.enter_context(context)
        yield


class LocalGraph:
    """The local edges of one forward pass and how a step gets the halo rows.

    ``listed_by_node``: the edges' :class:`~partgnn.models.node_sums.Incidence` (made once, on
    first use) serves the sums into nodes (``model.fused``). ``chunked``: the edge MLPs
    run in chunks of edges, recomputed in the backward pass (the first encodes the edges).
    """

    def __init__(
        self,
        src: torch.Tensor,
        dst: torch.Tensor,
        n_owned: int,
        exchange: Exchange,
        hide: bool,
        n_interior: int | None,
        *,
        listed_by_node: bool = False,
        chunked: bool = False,
    ) -> None:
        self.src, self.dst, self.n_owned = src, dst, n_owned
        self.exchange, self.hide, self.n_interior = exchange, hide, n_interior
        self.listed_by_node = listed_by_node
        self.chunked = chunked
        #: The steps run in recomputed regions (activation recomputation).
        self.in_regions = False
        #: The current region's edge MLPs' kept graphs, in the order of their calls (``None``
        #: outside a region's forward pass and recomputation), and whether it is the latter.
        self._kept: deque[KeptGraphs] | None = None
        self._replaying = False
        #: The initial encodings ``(h0_local (N_local, H), e0 (E_local, H))`` the steps also see
        #: (``model.concat_initial``), else ``None``.
        self.initial: tuple[torch.Tensor, torch.Tensor] | None = None
        self._incidence: Incidence | None = None

    def incidence(self, n_local: int) -> Incidence | None:
        """The edges listed by node, of ``n_local`` local nodes (``None`` unless
        ``listed_by_node``)."""
        if not self.listed_by_node:
            return None
        if self._incidence is None or self._incidence.n_nodes != n_local:
            self._incidence = Incidence.of(self.src, self.dst, n_local)
        return self._incidence

    def region(self) -> tuple[AbstractContextManager, AbstractContextManager]:
        """The contexts of a region's forward pass and of its recomputation (as
        :meth:`ReplayedExchange.region
        <partgnn.models.replayed_exchange.ReplayedExchange.region>` gives its own): the edge
        MLPs of both get the same :class:`KeptGraphs`, in order."""
        kept: deque[KeptGraphs] = deque()
        return self._within(kept, replaying=False), self._within(kept, replaying=True)

    @contextmanager
    def _within(self, kept: deque[KeptGraphs], *, replaying: bool) -> Iterator[None]:
        self._kept, self._replaying = kept, replaying
        try:
            yield
        finally:
            self._kept, self._replaying = None, False

    def kept_graphs(self) -> KeptGraphs | None:
        """The next edge MLP's :class:`KeptGraphs` in a region (``None`` outside one)."""
        if self._kept is None:
            return None
        if not self._replaying:
            self._kept.append(KeptGraphs())
            return self._kept[-1]
        if not self._kept:
            raise RuntimeError("a recomputed region calls more edge MLPs than its forward pass")
        kept = self._kept.popleft()
        # Only the region's last edge MLP keeps its graph: its backward pass comes first, at
        # once; an earlier one's graph would be held through the later steps' backward passes
        # (one MLP's activations more at the step's peak), so it is recomputed there instead.
        kept.replaying = not self._kept
        return kept

    def nodes(self, h: torch.Tensor) -> EdgeNodes:
        """How an edge MLP gets the latents of both endpoints: the halo rows exchanged inside
        it (hiding the communication), or exchanged here (with the edges listed by node for the
        gradient of their gather)."""
        if self.hide:
            return EdgeNodes(
                h, self.src, self.dst, exchange=self.exchange, n_interior=self.n_interior
            )
        local = self.exchange(h)
        return EdgeNodes(local, self.src, self.dst, incidence=self.incidence(local.shape[0]))
