#!/bin/bash
# Issue 70: pretrained:trackml-full's (cluster features) cut on 10 validation events and its
# held-out figures, from the repository root; W: the run's folder (its events, graphs and run/,
# as tools/bench_full_recipe.py made them for the second stage). The tables: tables.md here.
#   bash docs/results/recipe_full/score_recipe.sh W
set -euo pipefail
W=${1:?W: the run folder}
FEATURES='[{"r": 1000.0}, {"phi": 3.141592653589793}, {"z": 1000.0}, {"eta": 1.0}, "cell_count", "cell_val", "leta", "lphi", {"lx": 0.1}, "ly", {"lz": 0.1}, "geta", {"gphi": 3.14}]'
OMP_NUM_THREADS=2 .venv/bin/python tools/bench_full_recipe.py --out "$W" \
  --map partgnn/pretrained/trackml-full.map.npz --realism module-planes field-profile secondaries \
  --workers 2 --train-events 450 --val-events 2 --impure-rate 0.01 --track-building junction \
  --no-train --set "data.node_features=$FEATURES" --set optim.schedule=cosine \
  --set optim.max_steps=3000
