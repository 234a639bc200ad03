#!/bin/bash
# GPU-machine script for the Hopper (sm90 WGMMA/TMA) backward: build for
# sm_90a, check dQ/dK/dV of every covered option against the cpu backend
# (outputs poisoned, all elements; bf16 and f16; shapes through both the
# single-CTA and the cluster kernels, and one the generic kernels take),
# compute-sanitizer memcheck / racecheck / synccheck, repeated large runs
# (a hang shows as a timeout), the test suite on the cuda backend with the
# default and the generic kernels (dbias and deterministic cases run the
# generic kernels), and backward timings beside PyTorch SDPA.
#
#   bash bench/sm90-bwd-check.sh                  (logs under $OUT or /tmp/ffpa-sm90-bwd)
#   STEPS="check perf" bash bench/sm90-bwd-check.sh
#   PERF="1,32,32,8192,8192,512,512" KERNELS="auto generic" STEPS=perf bash bench/sm90-bwd-check.sh
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ffpa-sm90-bwd}
mkdir -p "$OUT"
B=${BUILD:-build-sm90}
STEPS=${STEPS:-check sanitize stress tests perf sdpa}
step() { [[ " $STEPS " == *" $1 "* ]]; }
. bench/sm90-build.sh

# B,Hq,Hkv,Nq,Nkv,Dqk,Dv[,flags]: c causal, v varlen, b bias, d dropout.
CHECK_SHAPES=(${CHECK_SHAPES:-
  1,2,2,77,77,64,64 2,4,2,130,200,128,128,c 1,2,1,70,33,256,256,c 1,2,2,90,150,320,320,c 1,2,2,300,300,512,512,c
  3,4,2,100,120,128,128,vc 3,2,2,80,100,512,512,v 1,8,8,3,777,512,512,c 1,3,1,200,129,384,384,c 1,2,2,129,257,448,448
  1,2,2,100,100,512,384 1,2,1,1000,1000,512,512,c 1,2,1,70,150,1024,1024,c 1,2,2,90,90,768,768 1,2,2,100,100,576,512,c
  2,2,2,60,100,1024,1024,v 1,2,2,33,70,536,536 2,2,2,70,90,512,512,bd 1,4,1,256,512,1024,1024,c 1,2,2,64,64,1024,640
  1,2,1,100,130,320,320,cbd 1,2,2,70,150,1024,1024,bdc 2,4,2,100,120,128,128,vbd 1,2,2,90,90,768,768,d
  1,2,2,65,65,512,512,b})
if step check; then
  timeout 300 "$BENCH" --backend cuda --backward --check --no-time "${CHECK_SHAPES[@]}" >"$OUT/check.log" 2>&1
  note "check vs cpu (bf16): rc=$? fails=$(grep -c FAIL "$OUT/check.log") of ${#CHECK_SHAPES[@]}"
  timeout 120 "$BENCH" --backend cuda --dtype f16 --backward --check --no-time 1,2,2,90,150,320,320,c \
    1,2,1,70,150,1024,1024,c 2,4,2,130,200,128,128,vc 1,2,2,70,90,512,512,bd >"$OUT/check-f16.log" 2>&1
  note "check vs cpu (f16): rc=$? fails=$(grep -c FAIL "$OUT/check-f16.log")"
fi

if step sanitize && command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck synccheck; do
    timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 "$BENCH" --backend cuda --backward --check --no-time \
      1,2,1,70,130,320,320,c 1,1,1,40,140,1024,1024,c 1,1,1,90,200,768,768,c 2,2,2,20,40,128,128,v \
      1,1,1,40,70,512,512,bd >"$OUT/san-$tool.log" 2>&1
    note "compute-sanitizer $tool: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/san-$tool.log" | tr '\n' ' ')"
  done
fi

if step stress; then
  hung=0
  for s in 1,32,32,8192,8192,768,768 1,32,32,8192,8192,1024,1024 1,32,32,8192,8192,320,320; do
    for i in 1 2 3; do
      timeout 60 "$BENCH" --backend cuda --backward --reps 10 "$s" >"$OUT/stress.log" 2>&1 || hung=$((hung + 1))
    done
  done
  note "stress: 9 runs of 10+ backward calls, $hung timed out or failed"
fi

if step tests; then
  for k in auto generic; do
    FFPA_CUDA_KERNEL=$k FFPA_TEST_BACKEND=cuda timeout 400 meson test -C "$B" --suite oracle --suite validation \
      --suite unit --num-processes 8 >"$OUT/tests-$k.log" 2>&1
    note "test suite (cuda, FFPA_CUDA_KERNEL=$k): rc=$? passed/failed/skipped: $(python3 tools/count_tests.py "$B/meson-logs/testlog.json")"
  done
fi

PERF=(${PERF:-1,32,32,8192,8192,512,512 1,32,32,8192,8192,512,512,c 1,32,32,8192,8192,1024,1024
  1,32,32,8192,8192,768,768 1,32,32,8192,8192,320,320 1,32,8,8192,8192,512,512 1,32,32,8192,8192,256,256
  1,32,32,8192,8192,128,128 1,32,32,8192,8192,512,512,d 1,32,32,8192,8192,512,512,b})
if step perf; then
  for k in ${KERNELS:-auto}; do
    FFPA_CUDA_KERNEL=$k timeout 400 "$BENCH" --backend cuda --backward --reps ${REPS:-10} --csv "$OUT/ffpa-$k.csv" \
      "${PERF[@]}" >"$OUT/bench-$k.log" 2>&1
    note "bench $k rc=$?"
  done
fi
if step sdpa && python3 -c "import torch" 2>/dev/null; then
  PYTHONUNBUFFERED=1 timeout 500 python3 bench/sdpa_bench.py --backward --merge "$OUT/ffpa-auto.csv" \
    --csv "$OUT/compare.csv" >"$OUT/compare.log" 2>&1
  note "sdpa rc=$?"
fi

echo; echo "================ summary"
printf '%s\n' "${summary[@]}"
grep -h FAIL "$OUT"/check*.log | head -20
for k in ${KERNELS:-auto}; do echo "-- $k"; grep -v "^#" "$OUT/bench-$k.log" 2>/dev/null | head -20; done
tail -20 "$OUT/compare.log" 2>/dev/null
