#!/usr/bin/env bash
# Each event graph spread over P ranks with halo exchange (exact), launched with torchrun.
#   PARTS=2 bash examples/torchrun_halo.sh     (STEPS=50; DATA, RUNS folders; DEVICE=auto)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DATA=${DATA:-data} RUNS=${RUNS:-runs} STEPS=${STEPS:-50} PARTS=${PARTS:-2} DEVICE=${DEVICE:-auto}
DATA=$DATA PARTS=$PARTS bash "$HERE/make_data.sh"
SHARDS="$DATA/shards-metis$PARTS"

torchrun --standalone --nproc-per-node "$PARTS" -m partgnn train --config halo --replace \
    --set data.shards="$SHARDS" --set data.val_events=2 \
    --set optim.max_steps="$STEPS" --set run.dir="$RUNS/halo" \
    --set run.device="$DEVICE" --set run.progress=false --set run.tensorboard=false ${EXTRA:-}
torchrun --standalone --nproc-per-node "$PARTS" -m partgnn infer --device "$DEVICE" \
    --checkpoint "$RUNS/halo/checkpoints/last.pt" --shards "$SHARDS" --out "$RUNS/halo/scores.h5"
partgnn evaluate "$RUNS/halo/scores.h5" --graphs "$DATA/graphs.h5" --events "$DATA/events.h5" \
    --shards "$SHARDS" --out "$RUNS/halo/evaluation.json"
