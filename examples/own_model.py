"""Train one's own model with partgnn: a GraphConv edge classifier, exact on a partition.

The class below follows docs/MODEL_CONTRACT.md (owned rows only, one exchange per layer, the
same calls on every rank, LayerNorm rather than BatchNorm). A run config names it with
``model.target`` and passes ``model.kwargs``; this script trains it in full mode and with halo
exchange on 2 ranks and prints how far the two runs' weights are apart (float64: ~1e-15)::

    bash examples/make_data.sh                     # data/graphs.h5, data/shards-metis2
    PYTHONPATH=examples python examples/own_model.py --data data --steps 20

The same model from the command line, with the module importable (here: PYTHONPATH)::

    PYTHONPATH=examples torchrun --nproc-per-node 2 -m partgnn train --config halo \\
        --set model.target=own_model:EdgeGNN --set model.kwargs.hidden=32 \\
        --set data.shards=data/shards-metis2
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import torch
from torch import nn
from torch_geometric.nn import GraphConv

import partgnn


class EdgeGNN(nn.Module):
    """Node updates by GraphConv layers on the partition, then an MLP on each edge.

    Args:
        node_features: Width ``F_node`` of the node inputs (given by partgnn).
        edge_features: Width ``F_edge`` of the edge inputs (given by partgnn).
        hidden: Latent width ``H``.
        layers: GraphConv layers (one halo exchange each, plus one for the edge head).

    Shapes:
        - x: ``(N_local, F_node)``, owned rows first; edge_index ``(2, E_local)``;
          edge_attr ``(E_local, F_edge)``; output: logits ``(E_local,)``.
    """

    def __init__(
        self, *, node_features: int, edge_features: int, hidden: int = 32, layers: int = 3
    ):
        super().__init__()
        self.encode = nn.Linear(node_features, hidden)
        self.convs = nn.ModuleList(
            partgnn.PartitionedLayer(GraphConv(hidden, hidden)) for _ in range(layers)
        )
        self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(layers))
        self.head = nn.Sequential(
            nn.Linear(2 * hidden + edge_features, hidden), nn.SiLU(), nn.Linear(hidden, 1)
        )

    def forward(self, x, edge_index, edge_attr, *, exchange=None, n_owned=None):
        if n_owned is None:
            n_owned = getattr(exchange, "n_owned", x.shape[0])
        h = torch.nn.functional.silu(self.encode(x[:n_owned]))  # owned rows only
        for conv, norm in zip(self.convs, self.norms, strict=True):
            h = norm(h + torch.nn.functional.silu(conv(h, edge_index, exchange)))
        h_local = exchange(h) if exchange is not None else h  # halo rows for the edge head
        src, dst = edge_index
        return self.head(torch.cat([h_local[src], h_local[dst], edge_attr], dim=-1)).squeeze(-1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("data"))
    parser.add_argument("--runs", type=Path, default=Path("runs"))
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    common = [
        f"data.graphs={args.data / 'graphs.h5'}",
        f"data.shards={args.data / 'shards-metis2'}",
        "data.val_events=2",
        "model.target=own_model:EdgeGNN",
        "model.kwargs.hidden=16",
        f"optim.max_steps={args.steps}",
        "run.dtype=float64",
        f"run.device={os.environ.get('DEVICE', 'auto')}",
        "run.progress=false",
        "run.tensorboard=false",
    ]
    full_dir, halo_dir = args.runs / "own-full", args.runs / "own-halo"
    # Full mode in this process, through the Python API.
    partgnn.fit("full", overrides=[*common, "mode=full", f"run.dir={full_dir}"], replace=True)
    # Halo mode on 2 ranks, through the command line (the module must be importable there).
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), *sys.path]))
    sets = [a for o in [*common, "mode=halo", f"run.dir={halo_dir}"] for a in ("--set", o)]
    subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "partgnn", "train", "--config", "halo", "--replace", *sets],
        check=True, env=env,
    )  # fmt: skip
    full = torch.load(full_dir / "checkpoints" / "last.pt", weights_only=True)["model"]
    halo = torch.load(halo_dir / "checkpoints" / "last.pt", weights_only=True)["model"]
    worst = max(((halo[k] - v).norm() / v.norm()).item() for k, v in full.items())
    print(f"own model: halo (2 ranks) vs full weights after {args.steps} steps: {worst:.1e}")
    return 0 if worst < 1e-9 else 1


if __name__ == "__main__":
    sys.exit(main())
