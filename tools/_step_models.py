"""The models a step-time tool compares, on one random graph: partgnn's Interaction Network, the
peer's (acorn's InteractionGNN, through the peer harness, ``--peer-dir PEER``) and the reference
pipeline's CTD 2023 model (acorn's InteractionGNN2); one AdamW training step of each (shared by
tools/bench_gpu.py and tools/bench_launch_budget.py).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import torch

#: The peer harness's folder (``PEER/README.md``: getting acorn's source; ``peer_acorn.py``).
PEER_DIR = Path(__file__).resolve().parents[2] / "shared" / "peer"


def random_graph(nodes: int, edges: int, device: torch.device) -> dict[str, torch.Tensor]:
    """3 node features, 4 edge features (the position difference and its length), 10 % true."""
    generator = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(nodes, 3, generator=generator, device=device)
    src = torch.randint(0, nodes, (edges,), generator=generator, device=device)
    dst = (src + torch.randint(1, nodes, (edges,), generator=generator, device=device)) % nodes
    delta = x[dst] - x[src]
    return {
        "x": x,
        "x12": x.repeat(1, 4),  # the reference's 12 node features (its model reads 12)
        "edge_index": torch.stack([src, dst]),
        "edge_attr": torch.cat([delta, delta.norm(dim=1, keepdim=True)], dim=1),
        "y": (torch.rand(edges, generator=generator, device=device) < 0.1).float(),
    }


class Batch(dict):
    """The peer's batch: features by name, ``edge_index`` and ``region`` as attributes."""


def peer_batch(graph: dict[str, torch.Tensor], edge_features: bool) -> Batch:
    x = graph["x12"] if edge_features else graph["x"]
    batch = Batch({f"f{i}": x[:, i] for i in range(x.shape[1])})
    if edge_features:
        batch.update({f"e{i}": graph["edge_attr"][:, i] for i in range(4)})
    batch.edge_index = graph["edge_index"]
    batch.region = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
    return batch


def check_peer_source(acorn_src: Path, peer_dir: Path) -> None:
    """Exits in one line when ``acorn_src`` holds no acorn source (``PEER/README.md`` says how to
    get it: it is not part of the project)."""
    if not (Path(acorn_src) / "acorn").is_dir():
        sys.exit(f"{acorn_src}: no acorn source (see {Path(peer_dir) / 'README.md'})")


def load_peer(acorn_src: Path, peer_dir: Path) -> None:
    """Makes acorn's models importable the one way every tool loads them: through the peer
    harness's stubs (``PEER/peer_acorn.py``: its Lightning base class and ``torch_scatter``
    replaced by thin stand-ins); exits in one line without acorn's source."""
    check_peer_source(acorn_src, peer_dir)
    sys.path.insert(0, str(peer_dir))
    import peer_acorn

    peer_acorn.install_stubs(str(acorn_src))


def peer_model(graph: dict, hidden: int, *, iters: int = 8) -> tuple[torch.nn.Module, Callable]:
    """acorn's InteractionGNN with the peer harness's settings, reading every node column of
    ``graph["x"]`` (after :func:`load_peer`); the model and its forward pass on the graph."""
    from acorn.stages.edge_classifier.models.interaction_gnn import InteractionGNN

    hparams = dict(node_features=[f"f{i}" for i in range(graph["x"].shape[1])], hidden=hidden,
                   nb_node_layer=2, nb_edge_layer=2, n_graph_iters=iters, layernorm=True,
                   hidden_activation="SiLU", aggregation="sum")  # fmt: skip
    torch.manual_seed(0)
    model = InteractionGNN(hparams).to(graph["x"].device)
    batch = peer_batch(graph, edge_features=False)
    return model, lambda: model(batch)


def reference_model(graph: dict, hidden: int, checkpoint: bool) -> tuple[torch.nn.Module, Callable]:
    """acorn's InteractionGNN2 with examples/CTD_2023/gnn_train.yaml's model settings."""
    from acorn.stages.edge_classifier.models.interaction_gnn import InteractionGNN2

    hparams = dict(
        node_features=[f"f{i}" for i in range(12)], edge_features=["e0", "e1", "e2", "e3"],
        hidden=hidden,
        n_graph_iters=8, n_node_net_layers=3, n_edge_net_layers=3, n_edge_decoder_layers=3,
        layernorm=False, batchnorm=True, output_batch_norm=False,
        edge_output_transform_final_batch_norm=False, track_running_stats=False,
        hidden_activation="ReLU", output_activation="ReLU",
        edge_output_transform_final_activation=None, concat=True, node_net_recurrent=False,
        edge_net_recurrent=False, in_out_diff_agg=True, checkpointing=checkpoint,
    )  # fmt: skip
    torch.manual_seed(0)
    model = InteractionGNN2(hparams).to(graph["x"].device)
    batch = peer_batch(graph, edge_features=True)
    return model, lambda: model(batch)


def partgnn_model(
    hidden: int, checkpoint: bool, *, reference: bool, chunk_mb: float | None = None,
    steps: int = 8, mlp_layers: int = 2, fused: bool = False, node_features: int | None = None,
) -> torch.nn.Module:  # fmt: skip
    """partgnn's Interaction Network as the full recipe trains it (``reference``: with the CTD
    2023 model's settings); ``chunk_mb`` is ``model.chunk_mb``, ``fused`` ``model.fused``;
    ``node_features`` its input width (default: :func:`random_graph`'s, 3, or the reference's
    12)."""
    from partgnn.models.build import build_model
    from partgnn.train.config.sections import ModelConfig

    if reference:
        config = ModelConfig(hidden=hidden, steps=8, mlp_layers=3, activation="relu",
                             residual=False, layer_norm=False, batch_norm=True,
                             concat_initial=True, shared_weights=False,
                             recompute=checkpoint, fused=fused)  # fmt: skip
    else:
        config = ModelConfig(hidden=hidden, steps=steps, mlp_layers=mlp_layers,
                             activation="silu", layer_norm=True, shared_weights=True,
                             recompute=checkpoint, chunk_mb=chunk_mb, fused=fused)  # fmt: skip
    torch.manual_seed(0)
    width = node_features if node_features is not None else 12 if reference else 3
    return build_model(config, width, 4)


def partgnn_run(
    model: torch.nn.Module, graph: dict, *, reference: bool = False
) -> tuple[torch.nn.Module, Callable]:
    x = graph["x12"] if reference else graph["x"]
    model = model.to(x.device)
    return model, lambda: model(x, graph["edge_index"], graph["edge_attr"])


def training_step(
    model: torch.nn.Module, logits: Callable, y: torch.Tensor, device: torch.device,
    precision: str,
) -> Callable[..., None]:  # fmt: skip
    """One AdamW step of BCE with logits on ``y``, under bf16 autocast for ``bf16`` (AdamW's
    multi-tensor implementation, CUDA's default, on every device)."""
    optimizer = torch.optim.AdamW(model.parameters(), 1e-3, foreach=True)

    def step(phase: Callable[[str], None] = lambda name: None) -> None:
        """One step; ``phase`` is told when the forward pass, the backward pass and the
        optimizer begin."""
        optimizer.zero_grad(set_to_none=True)
        phase("forward")
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            out = logits()
        phase("backward")
        torch.nn.functional.binary_cross_entropy_with_logits(out.float(), y).backward()
        phase("optimizer")
        optimizer.step()

    return step
