#!/bin/bash
# Benchmark grid, like the FFPA README's table: head dims across (64..1024),
# rows SDPA TFLOP/s, ffpa TFLOP/s per kernel path, speedup; for dense,
# causal, GQA and decode problems. ffpa runs twice, with this device's tuning
# table (the default) and with FFPA_TUNING=0 (the planner's heuristics), so
# the table's effect is shown shape by shape; PyTorch SDPA runs on the same
# shapes in the same session. Writes CSVs, grid.md and grid.png.
#
#   bash bench/grid.sh [BUILD_DIR [OUT_DIR]]      (defaults: build, bench/results)
#
# Needs the CUDA plugin built in BUILD_DIR, python3 with torch and matplotlib.
# REPS (default 10) repetitions per shape, median; FFPA_TUNING_FILE is honoured
# for the tuned run.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
OUT=${2:-bench/results}
REPS=${REPS:-10}
BENCH="$BUILD/bench/ffpa-bench"
mkdir -p "$OUT"

DIMS="64 128 256 320 512 768 1024"
SHAPES=()
for d in $DIMS; do
  SHAPES+=("1,16,16,8192,8192,$d,$d" "1,16,16,8192,8192,$d,$d,c" "1,16,4,8192,8192,$d,$d"
           "1,32,8,1,8192,$d,$d")
done
# Off the grid (other N, four query rows): the nearest-shape lookup must not hurt there either.
for d in 128 512 1024; do
  SHAPES+=("1,16,16,2048,2048,$d,$d" "1,4,4,32768,32768,$d,$d" "1,32,32,4,4096,$d,$d")
done

unset FFPA_CUDA_FWD_STAGES
# The A/B runs shape by shape, the two runs of a shape back to back and in
# alternating order: clock drift over a whole pass (a few percent on this
# H100) then cannot pass for an effect of the table.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run_ab() { # which, shape index, shape
  local f="$tmp/$1.$2.csv"
  if [ "$1" = tuned ]; then
    env -u FFPA_TUNING "$BENCH" --backend cuda --reps "$REPS" --csv "$f" "$3"
  else
    FFPA_TUNING=0 "$BENCH" --backend cuda --reps "$REPS" --csv "$f" "$3"
  fi
}
echo "# ffpa with the tuning table (tuned) and with FFPA_TUNING=0 (heuristics), shape by shape"
for i in "${!SHAPES[@]}"; do
  if (( i % 2 )); then order="untuned tuned"; else order="tuned untuned"; fi
  for which in $order; do
    echo "## $which"
    run_ab "$which" "$i" "${SHAPES[$i]}"
  done
done
for which in tuned untuned; do
  head -1 "$tmp/$which.0.csv" >"$OUT/ffpa_$which.csv"
  for i in "${!SHAPES[@]}"; do tail -n +2 "$tmp/$which.$i.csv"; done >>"$OUT/ffpa_$which.csv"
done
echo "# PyTorch SDPA on the same shapes"
python3 bench/sdpa_bench.py --merge "$OUT/ffpa_tuned.csv" --csv "$OUT/sdpa.csv" >/dev/null
python3 bench/plot_grid.py --tuned "$OUT/ffpa_tuned.csv" --untuned "$OUT/ffpa_untuned.csv" \
  --sdpa "$OUT/sdpa.csv" --out "$OUT"
