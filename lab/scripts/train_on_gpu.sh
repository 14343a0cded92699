#!/bin/bash
# Train the diagnostic model on a GPU machine that has torch (and none of the agent's dependencies): several models
# at once on the one card, from examples written here with
#   .venv/bin/pinpoint-lab train diagnostic --cached-only --save-examples .gpu/examples.pkl.gz
# There, `pip install --no-deps . ./lab` makes `pinpoint` and `pinpoint_lab` importable without the agent's
# dependencies. Usage there: OUT=dir bash lab/scripts/train_on_gpu.sh EXAMPLES [BUDGET_S] [EPOCHS]
# Writes OUT/small-s0..5.pt, OUT/paper.pt and their logs; prints each run's best validation line.
set -u
EX=$1; B=${2:-200}; E=${3:-8}; OUT=${OUT:-/tmp/gpu}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
common="diagnostic --examples $EX --device ${DEVICE:-cuda} --epochs $E --time-budget $B"
for s in 0 1 2 3 4 5; do
  python3 -m pinpoint_lab.localization.cli $common --config small --seed "$s" --out "$OUT/small-s$s.pt" > "$OUT/small-s$s.log" 2>&1 &
done
python3 -m pinpoint_lab.localization.cli $common --config paper --lr 3e-4 --out "$OUT/paper.pt" > "$OUT/paper.log" 2>&1 &
wait
for f in "$OUT"/*.log; do echo "$f: $(tail -n 1 "$f" | cut -c1-220)"; done
