#!/usr/bin/env bash
# The same halo training launched with MPI (pip install partgnn[mpi] puts mpirun in the venv).
# Rank 0 picks the rendezvous address and sends it to the others over MPI.
#   PARTS=2 bash examples/mpirun_halo.sh       (STEPS=50; DATA, RUNS folders; DEVICE=auto)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DATA=${DATA:-data} RUNS=${RUNS:-runs} STEPS=${STEPS:-50} PARTS=${PARTS:-2} DEVICE=${DEVICE:-auto}
DATA=$DATA PARTS=$PARTS bash "$HERE/make_data.sh"
SHARDS="$DATA/shards-metis$PARTS"

mpirun -n "$PARTS" partgnn selfcheck --device "$DEVICE"
mpirun -n "$PARTS" partgnn train --config halo --replace \
    --set data.shards="$SHARDS" --set data.val_events=2 \
    --set optim.max_steps="$STEPS" --set run.dir="$RUNS/halo-mpi" \
    --set run.device="$DEVICE" --set run.progress=false --set run.tensorboard=false ${EXTRA:-}
