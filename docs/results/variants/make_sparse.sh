#!/usr/bin/env bash
# Issue 41 D1 sparsity: the same 4,000 events' map with triplet floor 0.25, and its graphs.
set -euo pipefail
# Run from the repository root: bash $0 (DATA: the issue-41 data folder, default data/full41).
ROOT=$(pwd)
[ -x .venv/bin/partgnn ] || { echo "run from the repository root (make setup first)" >&2; exit 2; }
cd "${DATA:-data/full41}"
P=$ROOT/.venv/bin/partgnn
export OMP_NUM_THREADS=2
[ -f map4000-t025.npz ] || /usr/bin/time -f "wall %e maxrss_kb %M" $P fit-module-map sim-41.h5 sim-42.h5 --pt-min 1.0 --floor 0.25 0.1 0.1 0.25 --triplets --triplet-floor 0.25 --out map4000-t025.npz > fit-t025.log 2>&1
export OMP_NUM_THREADS=1
[ -f graphs-t025-train-a.h5 ] || $P build-graphs events-train-a.h5 --method module-map --map map4000-t025.npz --out graphs-t025-train-a.h5 > log-t025-train-a.txt 2>&1 &
[ -f graphs-t025-test.h5 ] || $P build-graphs events-test.h5 --method module-map --map map4000-t025.npz --out graphs-t025-test.h5 > log-t025-test.txt 2>&1
wait
[ -d metis2-t025-train-a ] || $P partition graphs-t025-train-a.h5 --parts 2 --out metis2-t025-train-a > log-t025-part.txt 2>&1
echo done
