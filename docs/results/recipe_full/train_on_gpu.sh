#!/usr/bin/env bash
# Issue 50: the full-graph recipe trained on one lent GPU in one command, from the repository
# root: the training events simulated and built with a module map on WORKERS processes (what
# tools/bench_full_recipe.py makes: seed 11, events 0-149, pile-up 200), then one sitting of the
# recipe in full mode on the GPU (full mode on one device is the halo computation on one rank)
# until SECONDS_BUDGET seconds after the start, stopped with the trainer's signal (it
# checkpoints). What comes back (OUT): the last checkpoint, the run's metrics, config, scaler and
# summary, sittings.json and the log; score it where the held-out events are made with
#   tools/bench_full_recipe.py --out W --map MAP --realism ... --no-train
# (W/run/ and W/sittings.json being what came back).
#   OUT=out MAP=map.npz REALISM="module-planes field-profile secondaries" WORKERS=16 \
#     SECONDS_BUDGET=470 [EVENTS=150 PILEUP=200 EXTRA="--set optim.max_steps=2"] \
#     bash docs/results/recipe_full/train_on_gpu.sh
set -euo pipefail
start=$(date +%s)
: "${OUT:?OUT: where the results go}" "${MAP:?MAP: the module map}"
EVENTS=${EVENTS:-150} PILEUP=${PILEUP:-200} WORKERS=${WORKERS:-16}
SECONDS_BUDGET=${SECONDS_BUDGET:-470} REALISM=${REALISM:-} EXTRA=${EXTRA:-}
PY=${PY:-python3}
work=$(mktemp -d)
switches=()
for switch in $REALISM; do switches+=("--$switch"); done
$PY -m partgnn simulate --events "$EVENTS" --pileup "$PILEUP" --seed 11 --first-event-id 0 \
  "${switches[@]}" --workers "$WORKERS" --out "$work/events-train.h5"
$PY -m partgnn build-graphs "$work/events-train.h5" --method module-map --map "$MAP" \
  --workers "$WORKERS" --out "$work/graphs-train.h5"
prepared=$(date +%s)
minutes=$($PY -c "print(max(0.5, ($start + $SECONDS_BUDGET - $prepared) / 60))")
echo "data made in $((prepared - start)) s; training for $minutes min"
realism=()
[ -n "$REALISM" ] && realism=(--realism $REALISM)
# shellcheck disable=SC2086  # EXTRA holds options
$PY tools/bench_full_recipe.py --out "$work" --map "$MAP" "${realism[@]}" --ranks 1 \
  --train-events $((EVENTS - 2)) --pileup "$PILEUP" --no-score --minutes "$minutes" \
  --set model.recompute=false --set model.fused=false $EXTRA
mkdir -p "$OUT"
cp "$work/run/checkpoints/last.pt" "$work/run/metrics.csv" "$work/run/config.yaml" \
  "$work/run/input_scaler.json" "$work/sittings.json" "$OUT/"
cp "$work/run/summary.json" "$OUT/" 2>/dev/null || echo "no summary.json (stopped mid-epoch)"
echo "done in $(($(date +%s) - start)) s"
