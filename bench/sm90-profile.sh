#!/bin/bash
# GPU machine: Nsight Compute on the sm90 forward (one launch per shape):
# tensor-pipe activity, shared-memory traffic, warp stall reasons. Compare the
# single-CTA kernel (D=256) with the cluster kernels (D=512, 1024).
#   bash bench/sm90-profile.sh      (reports under $OUT or /tmp/ffpa-prof)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ffpa-prof}
mkdir -p "$OUT"
B=${BUILD:-build-sm90}
[ -d .deps ] && . tools/device-env.sh
if [ ! -f "$B/build.ninja" ]; then
  meson setup "$B" -Dcuda=enabled -Dcuda-archs=90a -Dhip=disabled >"$OUT/setup.log" 2>&1 || exit 1
fi
ninja -C "$B" >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
export FFPA_BACKEND_PATH="$PWD/$B/backends/cuda" FFPA_CUDA_KERNEL=sm90
M=sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
M=$M,sm__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed
M=$M,smsp__cycles_active.avg,sm__cycles_elapsed.avg
for shape in ${SHAPES:-1,32,32,4096,4096,256,256 1,32,32,4096,4096,512,512 1,32,32,4096,4096,1024,1024}; do
  tag=$(echo "$shape" | tr ',' '_')
  timeout 240 ncu -k regex:sm90_fwd_kernel -c 1 --section SpeedOfLight --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section Occupancy --metrics "$M" \
    "$B/bench/ffpa-bench" --backend cuda --iters 1 --reps 1 --warmup 0 "$shape" >"$OUT/ncu-$tag.txt" 2>&1
  echo "== $shape rc=$?"
  grep -E "gmma_cycles_active|Duration|Compute \(SM\) Throughput|Memory Throughput|mem_shared|Stall|Warp Cycles Per Issued|Issued Warp|smsp__pcsamp|cycles_active|Shared" "$OUT/ncu-$tag.txt" | head -40
done
