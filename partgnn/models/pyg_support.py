"""Which PyTorch Geometric layers run exactly on a partition, and why the others are refused.

A layer runs exactly on a rank's partition after one halo exchange when its output at node ``i``
depends only on ``x_i`` (and other per-node inputs such as ``pos``), the incoming edges of ``i``
and their source nodes' inputs: every incoming edge of an owned node is local (the partition
contract of docs/DESIGN.md). Several hops inside one forward, a normalisation by source degrees, a
graph built inside the layer, statistics over all nodes of the graph, an aggregation that depends
on the order of a node's incoming edges, and random masks (dropout) break that.

:data:`EXACT_LAYERS` is the allow-list: every entry is proven in real processes against the
whole graph in one process (tests/distributed/test_pyg_allow_list.py, whose cases must cover
exactly these classes). :data:`REFUSED_LAYERS` names every other class of
``torch_geometric.nn.conv`` with the reason it is refused (tests/models/test_pyg_support.py fails
on a class that is in neither). Conditions that depend on a layer's settings are checked by
:func:`configuration_problem` (at construction) and :func:`training_problem` (at every forward,
since ``train()``/``eval()`` change them).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.dropout import _DropoutNd
from torch_geometric.nn import aggr as pyg_aggr
from torch_geometric.nn import conv as pyg_conv
from torch_geometric.nn import norm as pyg_norm
from torch_geometric.nn.aggr.fused import FusedAggregation

#: Layers proven exact on partitions, with what the wrapper does for them beyond the feature
#: exchange. Keyed by class name in ``torch_geometric.nn.conv``.
EXACT_LAYERS: dict[str, str] = {
    "AGNNConv": "",
    "CGConv": "batch_norm=True only in eval mode",
    "ClusterGCNConv": "",
    "EdgeConv": "",
    "FastRGCNConv": "edge_type is an edge argument",
    "FeaStConv": "",
    "FiLMConv": "edge_type is an edge argument",
    "GATConv": "attention dropout only in eval mode",
    "GATv2Conv": "attention dropout only in eval mode",
    "GCNConv": "normalize=True: the node degrees are exchanged too; cached=True is refused",
    "GENConv": "norm='batch' (the default) only in eval mode",
    "GINConv": "",
    "GINEConv": "",
    "GMMConv": "",
    "GatedGraphConv": "num_layers=1 only",
    "GeneralConv": "",
    "GraphConv": "",
    "LEConv": "",
    "MFConv": "",
    "NNConv": "",
    "PNAConv": "",
    "PPFConv": "pos and normal are exchanged like x",
    "PointGNNConv": "pos is exchanged like x",
    "PointNetConv": "pos is exchanged like x",
    "PointTransformerConv": "pos is exchanged like x",
    "RGATConv": "edge_type is an edge argument; attention dropout only in eval mode",
    "RGCNConv": "edge_type is an edge argument",
    "ResGatedGraphConv": "",
    "SAGEConv": "order-dependent aggregations (aggr='lstm') are refused",
    "SimpleConv": "",
    "TransformerConv": "attention dropout only in eval mode",
    "WLConvContinuous": "",
}

_MULTI_HOP = "propagates several hops in one forward, which needs an exchange per hop"
_SOURCE_DEGREE = "normalises by source-node degrees, which a rank does not know for its halo"

#: Every other class of ``torch_geometric.nn.conv``, with the reason it is refused.
REFUSED_LAYERS: dict[str, str] = {
    "APPNP": _MULTI_HOP,
    "ARMAConv": _MULTI_HOP,
    "AntiSymmetricConv": "iterates its inner layer inside one forward; wrap the inner layer",
    "ChebConv": _MULTI_HOP,
    "CuGraphGATConv": "needs cugraph-ops and a CSC graph of its own, not a partition",
    "CuGraphRGCNConv": "needs cugraph-ops and a CSC graph of its own, not a partition",
    "CuGraphSAGEConv": "needs cugraph-ops and a CSC graph of its own, not a partition",
    "DNAConv": _SOURCE_DEGREE,
    "DirGNNConv": "also aggregates over outgoing edges, which a rank does not all hold",
    "DynamicEdgeConv": "builds its own k-NN graph, which is not the partition's graph",
    "EGConv": _SOURCE_DEGREE,
    "FAConv": _SOURCE_DEGREE,
    "FusedGATConv": "needs dgNN and CSR/CSC inputs of its own, not a partition",
    "GCN2Conv": _SOURCE_DEGREE,
    "GPSConv": "attends over all nodes of the graph (global attention)",
    "GravNetConv": "builds its own k-NN graph, which is not the partition's graph",
    "HANConv": "takes a heterogeneous graph (dicts of node and edge types)",
    "HEATConv": "takes a per-node node_type, which the wrapper does not exchange",
    "HGTConv": "takes a heterogeneous graph (dicts of node and edge types)",
    "HeteroConv": "takes a heterogeneous graph (dicts of node and edge types)",
    "HypergraphConv": "takes a hyperedge incidence, not a graph",
    "LGConv": _SOURCE_DEGREE,
    "MeshCNNConv": "takes mesh edges with a fixed four-neighbour layout, not a graph",
    "MessagePassing": "is the base class; wrap a layer (yours with assume_exact=True)",
    "MixHopConv": _MULTI_HOP,
    "PANConv": "sums powers of the adjacency (several hops) and needs torch-sparse",
    "PDNConv": _SOURCE_DEGREE,
    "SGConv": _MULTI_HOP,
    "SSGConv": _MULTI_HOP,
    "SignedConv": "takes two edge sets (positive and negative) in one forward",
    "SplineConv": "needs torch-spline-conv, which partgnn does not install (not proven)",
    "SuperGATConv": "samples negative edges over the whole graph in training mode",
    "TAGConv": _MULTI_HOP,
    "WLConv": "hashes colours into a table that each process fills in its own order",
    "XConv": "builds its own k-NN graph, which is not the partition's graph",
}

#: Aggregations whose result at a node depends only on the multiset of its incoming messages,
#: proven on partitions. Not here: order-dependent ones (LSTM, GRU, MLP, Sort, set transformers,
#: LCM) and median/quantile (PyG 2.8 indexes out of range when the last nodes have no edges).
ORDER_FREE_AGGREGATIONS: tuple[type[nn.Module], ...] = (
    pyg_aggr.SumAggregation,
    pyg_aggr.MeanAggregation,
    pyg_aggr.MaxAggregation,
    pyg_aggr.MinAggregation,
    pyg_aggr.MulAggregation,
    pyg_aggr.VarAggregation,
    pyg_aggr.StdAggregation,
    pyg_aggr.SoftmaxAggregation,
    pyg_aggr.PowerMeanAggregation,
    pyg_aggr.AttentionalAggregation,
    pyg_aggr.DegreeScalerAggregation,
    pyg_aggr.MultiAggregation,
    FusedAggregation,  # several of the above in one pass
)

#: Normalisations with statistics over all nodes of a graph (wrong on a part of it, always).
GRAPH_NORMS: tuple[type[nn.Module], ...] = (
    pyg_norm.InstanceNorm,
    pyg_norm.GraphNorm,
    pyg_norm.GraphSizeNorm,
    pyg_norm.PairNorm,
    pyg_norm.MeanSubtractionNorm,
    pyg_norm.DiffGroupNorm,
)

#: Keyword arguments of a layer's forward that hold one row per node; the wrapper takes their
#: owned rows and exchanges them like ``x``.
NODE_KWARGS: tuple[str, ...] = ("pos", "normal")

#: Keyword arguments that hold one row per local edge (their first dimension is checked).
EDGE_KWARGS: tuple[str, ...] = ("edge_attr", "edge_weight", "edge_type")


def pyg_layer_name(layer: nn.Module) -> str | None:
    """The name of ``layer``'s class in ``torch_geometric.nn.conv``, or ``None`` for any other.

    A subclass (one's own layer derived from a PyG layer) is not the PyG layer: ``None``.
    """
    name = type(layer).__name__
    return name if getattr(pyg_conv, name, None) is type(layer) else None


def refusal(layer: nn.Module, *, assume_exact: bool = False) -> str | None:
    """Why ``layer`` cannot be wrapped, or ``None`` when it can.

    Args:
        layer: A module meant for :class:`~partgnn.models.partitioned_layer.PartitionedLayer`.
        assume_exact: The caller vouches for a layer outside the allow-list (one's own layer,
            or a subclass of a PyG layer). Refused PyG layers stay refused.
    """
    name = pyg_layer_name(layer)
    if name in REFUSED_LAYERS:
        return f"{name} is not exact on a partition: it {REFUSED_LAYERS[name]}"
    if name is None and not assume_exact:
        return (
            f"{type(layer).__name__} is not on the allow-list of layers proven exact on a "
            "partition (partgnn.models.pyg_support.EXACT_LAYERS); if its output at node i "
            "depends only on node i's inputs, its incoming edges and their source nodes' inputs, "
            "pass assume_exact=True"
        )
    if name is not None and name not in EXACT_LAYERS:
        return f"{name} is a PyG layer partgnn has not classified (a newer PyG?); not proven exact"
    return configuration_problem(layer)


def configuration_problem(layer: nn.Module) -> str | None:
    """A setting of ``layer`` that makes it inexact on a partition in any mode, or ``None``."""
    name = type(layer).__name__
    if getattr(layer, "flow", "source_to_target") != "source_to_target":
        return (
            f"{name} has flow {layer.flow!r}; only 'source_to_target' is exact on a partition "
            "(outputs would depend on outgoing edges, which a rank does not all hold)"
        )
    if isinstance(layer, pyg_conv.GatedGraphConv) and layer.num_layers > 1:
        return (
            f"GatedGraphConv(num_layers={layer.num_layers}) {_MULTI_HOP}; stack "
            "GatedGraphConv(num_layers=1) wrappers instead"
        )
    for module in layer.modules():
        if isinstance(module, pyg_aggr.Aggregation) and not isinstance(
            module, ORDER_FREE_AGGREGATIONS
        ):
            return (
                f"{name} aggregates with {type(module).__name__}, which is not among the "
                "aggregations proven exact on a partition (it depends on the order of a node's "
                "incoming edges, which a partition does not keep, or is not proven)"
            )
        if isinstance(module, GRAPH_NORMS) or (
            isinstance(module, pyg_norm.LayerNorm) and module.mode == "graph"
        ):
            return (
                f"{name} contains {type(module).__name__}, whose statistics run over all nodes "
                "of the graph, not the rank's part"
            )
    return None


def training_problem(layer: nn.Module) -> str | None:
    """A module of ``layer`` that is inexact in its current train/eval mode, or ``None``.

    Batch normalisation with batch statistics (training mode, or no running statistics) and any
    dropout in training mode (``nn.Dropout`` modules, a float ``dropout`` attribute such as
    GATConv's attention dropout, or the per-layer list of PyG's ``MLP``) are refused: batch
    statistics would be the rank's part's, and random masks differ from the whole graph's.
    """
    name = type(layer).__name__
    for module in layer.modules():
        if isinstance(module, _BatchNorm) and (module.training or not module.track_running_stats):
            return (
                f"{name} contains {type(module).__name__} with batch statistics (training mode), "
                "which would be the rank's part's, not the graph's; use eval() for it, or a "
                "per-node norm such as LayerNorm"
            )
        rate = _dropout_rate(module)
        if module.training and rate > 0.0:
            return (
                f"{name} contains dropout ({type(module).__name__}, p={rate}) "
                "in training mode, whose random mask is not the whole graph's; set it to 0 or "
                "apply dropout outside the wrapped layer"
            )
    return None


def _dropout_rate(module: nn.Module) -> float:
    if isinstance(module, _DropoutNd):
        return float(module.p)
    rate = getattr(module, "dropout", 0.0)
    if isinstance(rate, int | float) and not isinstance(rate, bool):
        return float(rate)
    if isinstance(rate, list | tuple) and all(isinstance(r, int | float) for r in rate):
        return float(max(rate, default=0.0))
    if isinstance(rate, torch.Tensor) and rate.numel() == 1:
        return float(rate)
    return 0.0
