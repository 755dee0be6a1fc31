#!/usr/bin/env bash
# Issue 41 D2/D3: the recipe's held-out figures with the reproducible map.
# The map: partgnn fit-module-map --simulate 41:100000:2000 --simulate 42:200000:2000 --pt-min 1.0
#   --floor 0.25 0.1 0.1 0.25 --triplets --triplet-floor 0.25 --workers 2 --out map-trackml-full.npz
# recipe/ holds links to the run and training data of the variant run (its first three sittings
# ran under tools/bench_full_variants.py with the same config and overrides).
set -euo pipefail
# Run from the repository root: bash $0 (DATA: the issue-41 data folder, default data/full41).
ROOT=$(pwd)
[ -x .venv/bin/partgnn ] || { echo "run from the repository root (make setup first)" >&2; exit 2; }
cd "${DATA:-data/full41}"
PY=$ROOT/.venv/bin/python
export OMP_NUM_THREADS=2
$PY - <<'PYEOF'
import numpy as np
a, b = np.load("map4000-t025.npz"), np.load("map-trackml-full.npz")
same = all(np.array_equal(a[k], b[k]) for k in a.files if k != "settings")
print("map arrays equal to the training map's:", same, sorted(a.files) == sorted(b.files))
PYEOF
OMP_NUM_THREADS=1 $PY $ROOT/tools/bench_full_recipe.py --out recipe --map map-trackml-full.npz --no-train > recipe/tables.md 2> recipe/score.log
$PY $ROOT/tools/bench_module_map.py recipe/events-test.h5 t025=map-trackml-full.npz --maps-only > recipe/construction.md 2>&1
echo done
