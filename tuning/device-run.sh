#!/bin/bash
# One call on the GPU machine: sanity check, the tuner (forward and
# backward), the checks again with the new table, and the benchmark grid
# with and without it. Everything lands in $OUT/results (tarred at the end).
#
#   OUT=$OUT BUILD=build-tune bash tuning/device-run.sh
#
# Uses BUILD if its ffpa-bench runs the cuda backend, else configures and
# builds it here (sm_90a only). Time on an H100: build ~1 min (if not
# carried), tuner TUNE_BUDGET (default 240 s, plus the shape in flight),
# oracle tests with the table ~1 min (ORACLE=0 skips them), grid ~2 min.
set -u
cd "$(dirname "$0")/.."
. tools/device-env.sh
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
B=${BUILD:-build-tune}
OUT=${OUT:-/tmp/ffpa-device-run}
R="$OUT/results"
mkdir -p "$R"
LOG="$R/run.log"
say() { echo "$@" | tee -a "$LOG"; }
unset FFPA_CUDA_FWD_STAGES FFPA_CUDA_KERNEL FFPA_BWD_SMEM_LIMIT FFPA_TUNING FFPA_TUNING_FILE

nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv 2>&1 | tee -a "$LOG"
if ! "$B/bench/ffpa-bench" --backend cuda --no-time 1,1,1,64,64,64,64 >>"$LOG" 2>&1; then
  say "# carried build does not run here: building"
  rm -rf "$B"
  { meson setup "$B" -Dcuda-archs=90a -Dhip=disabled && ninja -C "$B"; } >>"$LOG" 2>&1 || { say "BUILD FAILED"; exit 1; }
fi
SANITY=(1,2,2,256,256,512,512 1,2,2,200,300,128,128,c 1,8,2,1,4096,320,320 1,32,8,1,8192,1024,1024
        1,4,4,1024,1024,64,64 1,4,1,512,512,768,768,c)

say "## sanity: cuda vs cpu, heuristics"
FFPA_TUNING=0 "$B/bench/ffpa-bench" --backend cuda --check --no-time "${SANITY[@]}" 2>&1 | tee -a "$LOG"

say "## tuner (forward and backward)"
mkdir -p "$B/ffpa/tuning"
t0=$(date +%s)
(cd "$B/ffpa/tuning" && ../../tuning/ffpa-tune --pass both --budget-s "${TUNE_BUDGET:-240}") 2>&1 | tee "$R/tune.log"
say "# tuner wall $(( $(date +%s) - t0 )) s"
cp "$B"/ffpa/tuning/*.json "$R/" 2>/dev/null
ls -la "$B/ffpa/tuning" | tee -a "$LOG"

# The core finds the new table in $B/ffpa/tuning (beside $B's libffpa).
say "## sanity: cuda vs cpu with the table"
"$B/bench/ffpa-bench" --backend cuda --check --no-time "${SANITY[@]}" 2>&1 | tee -a "$LOG"
if [ "${ORACLE:-1}" != 0 ]; then
  say "## oracle tests (forward and backward) on cuda with the table"
  t0=$(date +%s)
  FFPA_TEST_BACKEND=cuda meson test -C "$B" --suite oracle --print-errorlogs >>"$LOG" 2>&1 \
    && say "# oracle tests passed ($(( $(date +%s) - t0 )) s)" || say "ORACLE TESTS FAILED (see run.log)"
fi

say "## grid (tuned, untuned, SDPA)"
t0=$(date +%s)
bash bench/grid.sh "$B" "$R" 2>&1 | tee "$R/grid.log"
say "# grid wall $(( $(date +%s) - t0 )) s"
(cd "$OUT" && tar czf results.tgz results)
cp "$R/grid.png" "$R/grid.md" "$OUT/" 2>/dev/null
true
