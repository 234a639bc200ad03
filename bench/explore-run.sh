#!/bin/bash
# Exploratory pass on the GPU machine (no tests, no sanitizer): SASS of
# cubins built elsewhere (carried in build-perf/sass/), a forward-only sm_90a
# build, a ring-depth sweep beside SDPA and one ncu profile. Short table last.
#   bash bench/explore-run.sh      (outputs under $OUT)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ffpa-explore}
mkdir -p "$OUT"
[ -d .deps ] && . tools/device-env.sh
export PATH="$PATH:/usr/local/cuda/bin"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader

# ---- SASS: instruction mix per kernel, whole listings kept in one archive
if ls build-perf/sass/*.cubin >/dev/null 2>&1; then
  mkdir -p /tmp/sass
  for c in build-perf/sass/*.cubin; do
    n=$(basename "$c" .cubin)
    cuobjdump -sass "$c" >"/tmp/sass/$n.sass" 2>&1
    python3 bench/sass_mix.py "/tmp/sass/$n.sass" | sed "s/^/$n /"
  done | tee "$OUT/sass-mix.txt"
  tar -czf "$OUT/sass.tgz" -C /tmp sass
fi

# ---- build (forward plugin and bench only, sm_90a)
B=build-explore
t0=$(date +%s)
meson setup "$B" -Dcuda=enabled -Dcuda-archs=90a -Dtests=false -Dhip=disabled >"$OUT/setup.log" 2>&1 &&
  ninja -C "$B" >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/setup.log" "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
BENCH="$B/bench/ffpa-bench"
export FFPA_BACKEND_PATH="$PWD/$B/backends/cuda"

SHAPES=${SHAPES:-"1,32,32,8192,8192,128,128 1,32,32,8192,8192,320,320 1,32,32,8192,8192,512,512 1,32,32,8192,8192,1024,1024"}
"$BENCH" --backend cuda --check --no-time 2,4,2,130,200,128,128,cl 1,2,2,90,150,320,320,cl \
  1,2,2,65,65,512,512,l 1,2,1,33,100,1024,1024,cl 1,4,4,100,100,72,72,l 2>&1 | tail -6
for st in ${STAGES:-2 3}; do
  FFPA_CUDA_FWD_STAGES=$st "$BENCH" --backend cuda --reps 10 --csv "$OUT/ffpa-st$st.csv" $SHAPES \
    2>&1 | grep -v "^#" | sed "s/^/stages=$st /"
done | tee "$OUT/stages.log"
PYTHONUNBUFFERED=1 python3 bench/sdpa_bench.py --merge "$OUT/ffpa-st2.csv" 2>&1 | tail -8

if command -v ncu >/dev/null && [ -n "${NCU_SHAPE:-1,32,32,4096,4096,128,128}" ]; then
  ncu --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis_Tables -k regex:ffpa_fwd_kernel --launch-count 1 \
    "$BENCH" --backend cuda --iters 1 --reps 10 --warmup 0 "${NCU_SHAPE:-1,32,32,4096,4096,128,128}" \
    >"$OUT/ncu.log" 2>&1
  grep -E "Duration|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Issued Warp|Stall|Bank|No Eligible|Eligible Warps" \
    "$OUT/ncu.log" | head -30
fi
