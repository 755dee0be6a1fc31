#!/usr/bin/env bash
# Issue 41 D5: the real TrackML sample (5 % of a real pile-up-200 event) built by the shipped
# model's construction and scored with it at the card's cut; never tuned on.
set -euo pipefail
# Run from the repository root: bash $0 (DATA: the issue-41 data folder, default data/full41).
ROOT=$(pwd)
[ -x .venv/bin/partgnn ] || { echo "run from the repository root (make setup first)" >&2; exit 2; }
cd "${DATA:-data/full41}"
P=$ROOT/.venv/bin/partgnn
PY=$ROOT/.venv/bin/python
export OMP_NUM_THREADS=2
mkdir -p real && cd real
[ -f events.h5 ] || $P import-trackml $ROOT/tests/fixtures/trackml-sample --out events.h5
[ -f graphs.h5 ] || $P build-graphs events.h5 --method module-map --map ../map-trackml-full.npz --out graphs.h5 > build.txt 2>&1
C=${C:-../recipe/run/checkpoints/last.pt}
CUT=${CUT:?the card\'s cut}
[ -f scores.h5 ] || $P infer --checkpoint $C --graphs graphs.h5 --out scores.h5 --device cpu
$P evaluate scores.h5 --graphs graphs.h5 --events events.h5 --cut $CUT --out evaluation.json > evaluation.txt
$P evaluate scores.h5 --graphs graphs.h5 --events events.h5 --cut $CUT --pt-min 0.5 --pt-max 1 --out evaluation-low-pt.json > evaluation-low-pt.txt
rm -f perfect.h5
$PY - <<'PYEOF'
from partgnn.data.files.storage import GraphFile, write_scores
from partgnn.data.files.h5_files import file_sha256
with GraphFile("graphs.h5") as g:
    truth = [(int(x.event_id), x.y.numpy()) for x in g]
write_scores("perfect.h5", truth, provenance={"source_sha256": file_sha256("graphs.h5")})
PYEOF
$P evaluate perfect.h5 --graphs graphs.h5 --events events.h5 --cut 0.5 --out evaluation-perfect.json > evaluation-perfect.txt
$P evaluate perfect.h5 --graphs graphs.h5 --events events.h5 --cut 0.5 --pt-min 0.5 --pt-max 1 --out evaluation-perfect-low-pt.json > evaluation-perfect-low-pt.txt
rm -f perfect.h5
$PY $ROOT/tools/bench_module_map.py events.h5 t025=../map-trackml-full.npz > construction.md 2>&1
echo done
