"""One rank of the allow-list proof: every PyG layer of EXACT_LAYERS on this rank's shard.

:data:`CASES` builds each allow-listed layer (some twice: another aggregation, eval mode) with
the inputs it takes: ``edge_attr``, ``edge_weight``, ``edge_type`` per edge, ``pos`` and
``normal`` per node (exchanged by the wrapper). Each case runs as ``tanh(Linear(x)) -> layer``
so that the exchanged features need a gradient and the backward exchange runs too. For every
partition method the rank saves its owned outputs with their global node ids, the parameter
gradients and loss summed over the ranks; tests/distributed/test_pyg_allow_list.py compares them
with the bare layers on the whole graph in one process (float64). The cases are defined here and
imported by the test, so both sides build the same model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import aggr, conv

from partgnn.data.graphs.graph_config import EDGE_FEATURES, NODE_FEATURES
from partgnn.distributed.context import DistContext
from partgnn.distributed.halo_exchange import HaloExchanger
from partgnn.models.interaction_network import Exchange
from partgnn.models.partitioned_layer import PartitionedLayer
from partgnn.partition.rank_event import RankEvent
from tests.distributed.partitioned_run import worker_main
from tests.distributed.pyg_layer_worker import node_loss
from tests.distributed.reference import summed_over_ranks

F_IN = len(NODE_FEATURES)
F_EDGE = len(EDGE_FEATURES)
HIDDEN = 8
N_RELATIONS = 3


def _mlp(width_in: int, width_out: int = HIDDEN) -> nn.Sequential:
    return nn.Sequential(nn.Linear(width_in, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, width_out))


@dataclass(frozen=True)
class Case:
    """One allow-listed layer with the inputs it takes.

    Attributes:
        build: Makes the bare layer (``F_IN`` input features).
        inputs: Keyword inputs of its forward among edge_attr, edge_weight, edge_type, pos,
            normal.
        eval_mode: Run it in eval mode (a setting that is exact only there).
    """

    build: Callable[[], nn.Module]
    inputs: tuple[str, ...] = ()
    eval_mode: bool = False


#: Every class of EXACT_LAYERS at least once (tests/models/test_pyg_support.py checks that).
CASES: dict[str, Case] = {
    "SimpleConv": Case(lambda: conv.SimpleConv(aggr="mean", combine_root="cat")),
    "SimpleConv-every-order-free-aggregation": Case(
        lambda: conv.SimpleConv(
            aggr=[
                "sum",
                "mean",
                "max",
                "min",
                "mul",
                "var",
                "std",
                aggr.PowerMeanAggregation(learn=True),
                aggr.SoftmaxAggregation(learn=True),
                aggr.AttentionalAggregation(nn.Linear(F_IN, 1)),
            ],
            combine_root="cat",
        )
    ),
    "GCNConv": Case(lambda: conv.GCNConv(F_IN, HIDDEN), ("edge_weight",)),
    "SAGEConv": Case(lambda: conv.SAGEConv(F_IN, HIDDEN, aggr=["mean", "max"], project=True)),
    "GraphConv": Case(lambda: conv.GraphConv(F_IN, HIDDEN), ("edge_weight",)),
    "GatedGraphConv": Case(lambda: conv.GatedGraphConv(HIDDEN, num_layers=1), ("edge_weight",)),
    "ResGatedGraphConv": Case(
        lambda: conv.ResGatedGraphConv(F_IN, HIDDEN, edge_dim=F_EDGE), ("edge_attr",)
    ),
    "GATConv": Case(lambda: conv.GATConv(F_IN, 4, heads=2, edge_dim=F_EDGE), ("edge_attr",)),
    "GATConv-attention-dropout-in-eval": Case(
        lambda: conv.GATConv(F_IN, 4, heads=2, dropout=0.5), eval_mode=True
    ),
    "GATv2Conv": Case(lambda: conv.GATv2Conv(F_IN, 4, heads=2, edge_dim=F_EDGE), ("edge_attr",)),
    "TransformerConv": Case(
        lambda: conv.TransformerConv(F_IN, 4, heads=2, beta=True, edge_dim=F_EDGE), ("edge_attr",)
    ),
    "AGNNConv": Case(lambda: conv.AGNNConv()),
    "GINConv": Case(lambda: conv.GINConv(_mlp(F_IN), train_eps=True)),
    "GINEConv": Case(
        lambda: conv.GINEConv(_mlp(F_IN), train_eps=True, edge_dim=F_EDGE), ("edge_attr",)
    ),
    "MFConv": Case(lambda: conv.MFConv(F_IN, HIDDEN, max_degree=3)),
    "RGCNConv": Case(lambda: conv.RGCNConv(F_IN, HIDDEN, N_RELATIONS, num_bases=2), ("edge_type",)),
    "FastRGCNConv": Case(lambda: conv.FastRGCNConv(F_IN, HIDDEN, N_RELATIONS), ("edge_type",)),
    "RGATConv": Case(lambda: conv.RGATConv(F_IN, HIDDEN, N_RELATIONS), ("edge_type",)),
    "PointNetConv": Case(lambda: conv.PointNetConv(_mlp(F_IN + 3), _mlp(HIDDEN)), ("pos",)),
    "GMMConv": Case(lambda: conv.GMMConv(F_IN, HIDDEN, dim=F_EDGE, kernel_size=2), ("edge_attr",)),
    "NNConv": Case(
        lambda: conv.NNConv(F_IN, HIDDEN, _mlp(F_EDGE, F_IN * HIDDEN), aggr="mean"), ("edge_attr",)
    ),
    "CGConv": Case(lambda: conv.CGConv(F_IN, dim=F_EDGE), ("edge_attr",)),
    "CGConv-batch-norm-in-eval": Case(
        lambda: conv.CGConv(F_IN, dim=F_EDGE, batch_norm=True), ("edge_attr",), eval_mode=True
    ),
    "EdgeConv": Case(lambda: conv.EdgeConv(_mlp(2 * F_IN), aggr="max")),
    "PPFConv": Case(lambda: conv.PPFConv(_mlp(F_IN + 4), _mlp(HIDDEN)), ("pos", "normal")),
    "FeaStConv": Case(lambda: conv.FeaStConv(F_IN, HIDDEN, heads=2)),
    "PointTransformerConv": Case(lambda: conv.PointTransformerConv(F_IN, HIDDEN), ("pos",)),
    "LEConv": Case(lambda: conv.LEConv(F_IN, HIDDEN), ("edge_weight",)),
    "PNAConv": Case(
        lambda: conv.PNAConv(
            F_IN,
            HIDDEN,
            aggregators=["mean", "min", "max", "std"],
            scalers=["identity", "amplification", "attenuation", "linear"],
            deg=torch.tensor([3, 10, 6, 2, 1]),
            edge_dim=F_EDGE,
            towers=2,
            pre_layers=2,
        ),
        ("edge_attr",),
    ),
    "ClusterGCNConv": Case(lambda: conv.ClusterGCNConv(F_IN, HIDDEN, diag_lambda=0.3)),
    "GENConv": Case(
        lambda: conv.GENConv(
            F_IN, HIDDEN, learn_t=True, norm="layer", edge_dim=F_EDGE, msg_norm=True
        ),
        ("edge_attr",),
    ),
    "GENConv-default-batch-norm-in-eval": Case(
        lambda: conv.GENConv(F_IN, HIDDEN, edge_dim=F_EDGE), ("edge_attr",), eval_mode=True
    ),
    "WLConvContinuous": Case(lambda: conv.WLConvContinuous(), ("edge_weight",)),
    "FiLMConv": Case(lambda: conv.FiLMConv(F_IN, HIDDEN, N_RELATIONS), ("edge_type",)),
    "GeneralConv": Case(
        lambda: conv.GeneralConv(F_IN, HIDDEN, in_edge_channels=F_EDGE, attention=True, heads=2),
        ("edge_attr",),
    ),
    "PointGNNConv": Case(
        lambda: conv.PointGNNConv(_mlp(F_IN, 3), _mlp(F_IN + 3, F_IN), _mlp(F_IN, F_IN)), ("pos",)
    ),
}


class CaseModel(nn.Module):
    """``tanh(Linear(x)) -> layer`` of one case, the layer wrapped in a PartitionedLayer."""

    def __init__(self, case: Case) -> None:
        super().__init__()
        self.case = case
        self.pre = nn.Linear(F_IN, F_IN)
        self.conv = PartitionedLayer(case.build())

    def inputs(self, x: torch.Tensor, edge_attr: torch.Tensor) -> dict[str, torch.Tensor]:
        """The case's keyword inputs, each a function of one node's or one edge's features."""
        r, phi, z = x[:, 0], x[:, 1], x[:, 2]
        pos = torch.stack([r * torch.cos(phi), r * torch.sin(phi), z], dim=-1)
        values = {
            "edge_attr": edge_attr,
            "edge_weight": torch.sigmoid(edge_attr[:, 0]) + 0.5,
            "edge_type": (edge_attr[:, 1] > 0).long() + (edge_attr[:, 2] > 0).long(),
            "pos": pos,
            "normal": F.normalize(pos + 0.1, dim=-1),
        }
        return {key: values[key] for key in self.case.inputs}

    def forward(
        self,
        x: torch.Tensor,
        edge_index: torch.Tensor,
        edge_attr: torch.Tensor,
        exchange: Exchange | None = None,
        *,
        bare: bool = False,
    ) -> torch.Tensor:
        h = torch.tanh(self.pre(x))
        kwargs = self.inputs(x, edge_attr)
        if bare:  # the whole-graph reference: the PyG layer itself
            return self.conv.layer(h, edge_index=edge_index, **kwargs)
        return self.conv(h, edge_index, exchange, **kwargs)


def build_case(name: str) -> CaseModel:
    """The case's model in float64, with the same initial weights in every process."""
    torch.manual_seed(2468)
    model = CaseModel(CASES[name]).double()
    if model.case.eval_mode:
        model.eval()
        _settle_running_statistics(model)
    return model


def _settle_running_statistics(model: nn.Module) -> None:
    """Running statistics other than the initial 0 / 1, so eval-mode batch norm is tested."""
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.running_mean is not None:
            generator = torch.Generator().manual_seed(5)
            shape = module.running_mean.shape
            module.running_mean.copy_(torch.randn(shape, generator=generator, dtype=torch.float64))
            variance = torch.rand(shape, generator=generator, dtype=torch.float64) + 0.5
            module.running_var.copy_(variance)


def run_cases(event: RankEvent, context: DistContext) -> dict[str, dict]:
    """Every case on this rank's event: owned outputs, summed gradients and loss."""
    graph, n_owned = event.graph, event.plan.n_owned
    x, edge_attr = graph.x[:n_owned].double(), graph.edge_attr.double()
    results = {}
    for name in CASES:
        model = build_case(name)
        out = model(x, graph.edge_index, edge_attr, HaloExchanger.for_plan(event.plan, context))
        loss = node_loss(out)
        loss.backward()
        grads, total_loss = summed_over_ranks(model, loss, context.group)
        results[name] = {
            "nodes": torch.from_numpy(event.plan.owned_nodes),
            "out": out.detach(),
            "grads": grads,
            "loss": total_loss,
        }
    return results


if __name__ == "__main__":
    worker_main(run_cases)
