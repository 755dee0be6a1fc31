#!/usr/bin/env bash
# From acorn event files to a partitioned halo run and back (GNN4ITk's CommonFramework pipeline):
# import acorn's graph-construction output, split every graph over P ranks, train with halo
# exchange (torchrun), score the test set, build tracks and write scores and track labels back
# as acorn files for acorn's next stage.
#   ACORN=/path/to/acorn/output PARTS=2 bash examples/acorn_to_halo.sh
# ACORN is a folder with trainset/ valset/ testset/ of event<id>(-graph).pyg files; without it,
# stand-in files are made from a small simulated dataset (examples/make_acorn_files.py).
# PT_UNIT: unit of the files' pT (MeV for ITk files, the default; GeV for TrackML-based ones).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DATA=${DATA:-data} RUNS=${RUNS:-runs} STEPS=${STEPS:-50} PARTS=${PARTS:-2} DEVICE=${DEVICE:-auto}
PT_UNIT=${PT_UNIT:-MeV}
if [ -z "${ACORN:-}" ]; then
    ACORN="$DATA/acorn"
    DATA=$DATA PARTS=$PARTS bash "$HERE/make_data.sh"
    [ -d "$ACORN" ] || python "$HERE/make_acorn_files.py" --graphs "$DATA/graphs.h5" --out "$ACORN"
fi
OUT="$RUNS/acorn"
mkdir -p "$OUT"

# 1. acorn files -> graphs files (truth kept: evaluate works on them; loading is allow-listed).
for SET in trainset testset; do
    [ -f "$OUT/$SET.h5" ] || partgnn import-acorn "$ACORN/$SET" --out "$OUT/$SET.h5" --pt-unit "$PT_UNIT"
done
# 2. every graph split over PARTS ranks (METIS), one shard file per rank.
for SET in trainset testset; do
    [ -d "$OUT/$SET-shards" ] || partgnn partition "$OUT/$SET.h5" --parts "$PARTS" --out "$OUT/$SET-shards"
done
# 3. halo training (exactly the full-graph computation), then the test set scored on PARTS ranks.
torchrun --standalone --nproc-per-node "$PARTS" -m partgnn train --config halo --replace \
    --set data.shards="$OUT/trainset-shards" --set data.val_events=1 \
    --set optim.max_steps="$STEPS" --set run.dir="$OUT/run" \
    --set run.device="$DEVICE" --set run.progress=false --set run.tensorboard=false ${EXTRA:-}
torchrun --standalone --nproc-per-node "$PARTS" -m partgnn infer --device "$DEVICE" \
    --checkpoint "$OUT/run/checkpoints/last.pt" --shards "$OUT/testset-shards" --out "$OUT/scores.h5"
# 4. edge and track metrics (acorn's matching conventions beside double majority).
partgnn evaluate "$OUT/scores.h5" --graphs "$OUT/testset.h5" --track-building junction \
    --out "$OUT/evaluation.json"
# 5. scores and track labels back into acorn files (edge_scores, hit_track_labels, edge_track_labels).
partgnn export-acorn "$OUT/scores.h5" --graphs "$OUT/testset.h5" --tracks junction --out "$OUT/acorn-scored"
