#!/usr/bin/env bash
# Issue 41 D2/D3: the recipe's held-out figures with the reproducible map (run in data/full41).
# The map: partgnn fit-module-map --simulate 41:100000:2000 --simulate 42:200000:2000 --pt-min 1.0
#   --floor 0.25 0.1 0.1 0.25 --triplets --triplet-floor 0.25 --workers 2 --out map-trackml-full.npz
# recipe/ holds links to the run and training data of the variant run (its first three sittings
# ran under tools/bench_full_variants.py with the same config and overrides).
set -euo pipefail
cd /work/main/data/full41
PY=/work/main/.venv/bin/python
export OMP_NUM_THREADS=2
$PY - <<'PYEOF'
import numpy as np
a, b = np.load("map4000-t025.npz"), np.load("map-trackml-full.npz")
same = all(np.array_equal(a[k], b[k]) for k in a.files if k != "settings")
print("map arrays equal to the training map's:", same, sorted(a.files) == sorted(b.files))
PYEOF
OMP_NUM_THREADS=1 $PY /work/main/tools/bench_full_recipe.py --out recipe --map map-trackml-full.npz --no-train > recipe/tables.md 2> recipe/score.log
$PY /work/main/tools/bench_module_map.py recipe/events-test.h5 t025=map-trackml-full.npz --maps-only > recipe/construction.md 2>&1
echo done
