#!/bin/bash
# GPU-machine script for the Hopper (sm90 WGMMA/TMA) forward: build for
# sm_90a, check every option against the cpu backend (poisoned outputs, all
# elements) with FFPA_CUDA_KERNEL=sm90, compute-sanitizer memcheck /
# racecheck / synccheck on small shapes, the oracle test suite on the cuda
# backend, and timings of sm90 vs generic beside PyTorch SDPA. Short table last.
#
#   bash bench/sm90-check.sh          (logs under $OUT or /tmp/ffpa-sm90)
#   SKIP="tests sanitize" bash bench/sm90-check.sh
#   KERNELS=sm90 PERF_SHAPES="1,32,32,8192,8192,512,512" SKIP="tests sdpa" bash bench/sm90-check.sh
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ffpa-sm90}
mkdir -p "$OUT"
B=${BUILD:-build-sm90}
SKIP=${SKIP:-}
skip() { [[ " $SKIP " == *" $1 "* ]]; }
. bench/sm90-build.sh
SO="$B/backends/cuda/libffpa-cuda.so"
meson test -C "$B" sm90-sass >"$OUT/sass.log" 2>&1
note "SASS test (meson sm90-sass): rc=$? $(grep -h 'HGMMA' "$B/meson-logs/testlog.txt" | head -1)"

# Every option at awkward sizes: D 64..512, N not a tile multiple, GQA, cross, causal,
# bias, dropout, varlen, LSE.
CHECK_SHAPES=(${CHECK_SHAPES:-
  1,2,2,77,77,64,64,l 2,4,2,130,200,128,128,cl 1,2,1,70,33,256,256,cl 1,4,4,100,100,72,72,l
  1,2,2,90,150,320,320,cl 1,2,2,65,65,512,512,l 1,2,2,300,300,512,512,cl 1,2,2,50,80,200,200,bl
  2,4,2,70,90,128,128,dl 2,2,2,70,90,512,512,bdl 3,4,2,100,120,128,128,vcl 3,2,2,80,100,512,512,vbl
  1,8,8,3,777,512,512,cl 2,2,2,16,300,320,320,cdl 1,3,1,200,129,384,384,cl 1,2,2,129,257,448,448,l
  1,2,2,40,40,264,264,l 1,2,2,100,100,512,384,l 1,2,1,1000,1000,512,512,c 1,2,1,70,150,1024,1024,cl
  1,2,2,90,90,768,768,bl 1,2,2,100,100,576,512,cl 2,2,2,60,100,1024,1024,vdl 1,2,2,33,70,536,536,l})
if ! skip check; then
  FFPA_CUDA_KERNEL=sm90 timeout 150 "$BENCH" --backend cuda --check --no-time "${CHECK_SHAPES[@]}" >"$OUT/check.log" 2>&1
  note "check sm90 vs cpu: rc=$? fails=$(grep -c FAIL "$OUT/check.log") of ${#CHECK_SHAPES[@]}"
  FFPA_CUDA_KERNEL=sm90 timeout 120 "$BENCH" --backend cuda --dtype f16 --check --no-time 1,2,2,90,150,320,320,cl \
    2,4,2,130,200,128,128,cl 1,2,2,65,65,512,512,bdl >"$OUT/check-f16.log" 2>&1
  note "check sm90 f16: rc=$? fails=$(grep -c FAIL "$OUT/check-f16.log")"
fi

SAN_SHAPES=(1,2,1,70,90,128,128,bdl 1,1,1,33,70,256,256,cl 1,1,1,40,70,320,320,l 1,1,1,33,70,512,512,cbl
            2,2,2,20,40,128,128,vl 1,1,1,40,140,1024,1024,cl)
if ! skip sanitize && command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck synccheck; do
    FFPA_CUDA_KERNEL=sm90 timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 "$BENCH" --backend cuda \
      --no-time --check "${SAN_SHAPES[@]}" >"$OUT/san-$tool.log" 2>&1
    note "compute-sanitizer $tool: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/san-$tool.log" | tr '\n' ' ')"
  done
fi

if ! skip tests; then
  FFPA_TEST_BACKEND=cuda CMOCKA_MESSAGE_OUTPUT=TAP timeout 400 meson test -C "$B" --suite oracle --suite validation \
    --suite unit --print-errorlogs --num-processes 8 >"$OUT/tests.log" 2>&1
  note "test suite (cuda, auto kernels): rc=$? passed/failed/skipped: $(python3 tools/count_tests.py "$B/meson-logs/testlog.json")"
fi

PERF_SHAPES=(${PERF_SHAPES:-1,32,32,8192,8192,128,128 1,32,32,8192,8192,256,256 1,32,32,8192,8192,320,320
  1,32,32,8192,8192,512,512 1,32,32,16384,16384,512,512 1,32,32,8192,8192,512,512,c 1,32,8,8192,8192,512,512
  1,32,32,8192,8192,768,768 1,32,32,8192,8192,1024,1024})
if ! skip bench; then
  for k in ${KERNELS:-sm90 generic}; do
    FFPA_CUDA_KERNEL=$k timeout 300 "$BENCH" --backend cuda --reps 10 --csv "$OUT/ffpa-$k.csv" "${PERF_SHAPES[@]}" \
      >"$OUT/bench-$k.log" 2>&1
    note "bench $k rc=$?"
  done
  if python3 -c "import torch" 2>/dev/null && ! skip sdpa; then
    PYTHONUNBUFFERED=1 timeout 300 python3 bench/sdpa_bench.py --merge "$OUT/ffpa-sm90.csv" --csv "$OUT/compare.csv" \
      >"$OUT/compare.log" 2>&1
    note "sdpa rc=$?"
  fi
fi

# Diagnostic (DIAG=1): the cluster kernels without their DSMEM exchange (wrong
# results; timing only) - how much of a tile the exchange costs.
# DIAG=2: a clock64 breakdown of the steady loop (first cluster's consumers).
if [ "${DIAG:-0}" != 0 ]; then
  flag=$([ "$DIAG" = 2 ] && echo -DFFPA_SM90_DIAG_TIMELINE || echo -DFFPA_SM90_DIAG_SKIP_EXCHANGE)
  D="$B-diag$DIAG"
  if [ ! -f "$D/build.ninja" ]; then
    meson setup "$D" -Dcuda=enabled -Dcuda-archs=90a -Dhip=disabled -Dcuda_args=$flag >"$OUT/setup-diag.log" 2>&1
  fi
  ninja -C "$D" backends/cuda/libffpa-cuda.so bench/ffpa-bench >"$OUT/build-diag.log" 2>&1
  reps="--reps 1 --iters 1 --warmup 0"
  [ "$DIAG" = 1 ] && reps="--reps 10"
  FFPA_BACKEND_PATH="$PWD/$D/backends/cuda" FFPA_CUDA_KERNEL=sm90 timeout 120 "$D/bench/ffpa-bench" \
    --backend cuda $reps 1,32,32,8192,8192,256,256 1,32,32,8192,8192,512,512 1,32,32,8192,8192,512,512,c \
    1,32,32,8192,8192,768,768 1,32,32,8192,8192,1024,1024 >"$OUT/bench-diag.log" 2>&1
  note "diag $DIAG ($flag) rc=$?"
fi

echo; echo "================ summary"
printf '%s\n' "${summary[@]}"
grep -h FAIL "$OUT"/check*.log | head -20
for k in sm90 generic diag; do echo "-- $k"; grep -v "^#" "$OUT/bench-$k.log" 2>/dev/null | head -30; done
tail -15 "$OUT/compare.log" 2>/dev/null
