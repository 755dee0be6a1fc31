#!/usr/bin/env bash
# The whole pipeline in one process: data, full-graph training, scoring, evaluation.
#   bash examples/single_process.sh    (STEPS=50; DATA, RUNS folders; DEVICE=auto;
#                                       EXTRA="--set model.hidden=32")
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DATA=${DATA:-data} RUNS=${RUNS:-runs} STEPS=${STEPS:-50} DEVICE=${DEVICE:-auto}
DATA=$DATA bash "$HERE/make_data.sh"

partgnn train --config full --replace \
    --set data.graphs="$DATA/graphs.h5" --set data.val_events=2 \
    --set data.boundary_shards="$DATA/shards-${METHOD:-metis}${PARTS:-2}" \
    --set optim.max_steps="$STEPS" --set run.dir="$RUNS/full" \
    --set run.device="$DEVICE" --set run.progress=false --set run.tensorboard=false ${EXTRA:-}
partgnn infer --device "$DEVICE" --checkpoint "$RUNS/full/checkpoints/last.pt" \
    --graphs "$DATA/graphs.h5" --out "$RUNS/full/scores.h5"
partgnn evaluate "$RUNS/full/scores.h5" --graphs "$DATA/graphs.h5" --events "$DATA/events.h5" \
    --out "$RUNS/full/evaluation.json"
