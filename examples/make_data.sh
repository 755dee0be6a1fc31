#!/usr/bin/env bash
# Small simulated dataset for the examples: events, pT > 1 GeV graphs and P-part shards.
#   EVENTS (default 8), PILEUP (default 20), PARTS (default 2), METHOD (metis), DATA (data/)
# Run from any folder; everything is written under $DATA.
set -euo pipefail
EVENTS=${EVENTS:-8}
PILEUP=${PILEUP:-20}
PARTS=${PARTS:-2}
METHOD=${METHOD:-metis}
DATA=${DATA:-data}

mkdir -p "$DATA"
[ -f "$DATA/events.h5" ] || partgnn simulate --events "$EVENTS" --pileup "$PILEUP" --seed 1 --out "$DATA/events.h5"
[ -f "$DATA/graphs.h5" ] || partgnn build-graphs "$DATA/events.h5" --pt-min 1.0 --out "$DATA/graphs.h5"
[ -d "$DATA/shards-$METHOD$PARTS" ] || partgnn partition "$DATA/graphs.h5" --parts "$PARTS" --method "$METHOD" --out "$DATA/shards-$METHOD$PARTS"
