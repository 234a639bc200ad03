#!/bin/bash
# Tuning pass on the GPU machine: ring depth sweep + ncu stall breakdown.
#   bash bench/tune-run.sh   (after or instead of gpu-check.sh; same build dir)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ffpa-gpu-check}
SKIP="tests check sanitize bench" OUT=$OUT bash bench/gpu-check.sh >/dev/null 2>&1
B=${BUILD:-build-gpu}
BENCH="$B/bench/ffpa-bench"
export FFPA_BACKEND_PATH="$PWD/$B/backends/cuda"
SHAPES=${SHAPES:-"1,32,32,8192,8192,128,128 1,32,32,8192,8192,320,320 1,32,32,8192,8192,512,512 1,32,32,8192,8192,1024,1024"}
for st in 2 3 4; do
  echo "## stages $st"
  FFPA_CUDA_FWD_STAGES=$st "$BENCH" --backend cuda --reps 10 $SHAPES 2>&1 | grep -v "^#"
done | tee "$OUT/stages.log"
if command -v ncu >/dev/null; then
  for s in 1,32,32,4096,4096,128,128 1,32,32,4096,4096,512,512; do
    ncu --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
      -k regex:ffpa_fwd_kernel --launch-count 1 "$BENCH" --backend cuda --iters 1 --reps 10 --warmup 0 $s \
      >"$OUT/ncu-$(echo $s | cut -d, -f6).log" 2>&1
    grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Hit|L2 Hit|Achieved Occupancy|Registers Per|Stall|stall|Warp Cycles Per Issued|Issued Warp|Bank" "$OUT/ncu-$(echo $s | cut -d, -f6).log" | head -40
  done
fi
