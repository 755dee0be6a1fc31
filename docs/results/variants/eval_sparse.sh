#!/usr/bin/env bash
# Issue 41: a first reading of the sparse-graph variant's last checkpoint as the recipe reads it
# (cut chosen on validation events at 99 % target edge efficiency, then the held-out events).
set -euo pipefail
# Run from the repository root: bash $0 (DATA: the issue-41 data folder, default data/full41).
ROOT=$(pwd)
[ -x .venv/bin/partgnn ] || { echo "run from the repository root (make setup first)" >&2; exit 2; }
cd "${DATA:-data/full41}"
P=$ROOT/.venv/bin/partgnn
export OMP_NUM_THREADS=2
E=${E:-eval-sparse-t025}
mkdir -p $E
[ -f graphs-t025-val.h5 ] || $P build-graphs events-val.h5 --method module-map --map map4000-t025.npz --out graphs-t025-val.h5 > log-t025-val.txt 2>&1
C=d1/sparse-t025/run/checkpoints/last.pt
for n in val test; do
  [ -f $E/scores-$n.h5 ] || $P infer --checkpoint $C --graphs graphs-t025-$n.h5 --out $E/scores-$n.h5 --device cpu
done
$P evaluate $E/scores-val.h5 --graphs graphs-t025-val.h5 --events events-val.h5 --out $E/evaluation-val.json --cut-at-efficiency 0.99 > $E/val.txt
CUT=$(python3 -c "import json;print(repr(json.load(open('$E/evaluation-val.json'))['cut']))")
$P evaluate $E/scores-test.h5 --graphs graphs-t025-test.h5 --events events-test.h5 --out $E/evaluation-test.json --cut $CUT > $E/test.txt
$P evaluate $E/scores-test.h5 --graphs graphs-t025-test.h5 --events events-test.h5 --out $E/evaluation-test-low-pt.json --cut $CUT --pt-min 0.5 --pt-max 1 > $E/test-low-pt.txt
echo "cut $CUT" > $E/done
