#!/bin/bash
# The one script for the GPU machine: build the CUDA plugin (sm_80 + sm_90a),
# run the oracle tests on the cuda backend, ffpa-bench --check on every
# kernel/option, compute-sanitizer memcheck + racecheck on small shapes, the
# benchmark beside PyTorch SDPA; prints a short table last.
#
#   bash bench/gpu-check.sh            (logs and CSVs go to $OUT or /tmp/ffpa-gpu-check)
# Steps can be skipped: SKIP="tests sanitize bench" bash bench/gpu-check.sh
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ffpa-gpu-check}
mkdir -p "$OUT"
B=${BUILD:-build-gpu}
SKIP=${SKIP:-}
skip() { [[ " $SKIP " == *" $1 "* ]]; }
ARCHS=${ARCHS:-80,90a}
# cmocka and cJSON travel in .deps/ (tools/device-deps.sh): the GPU machine has no apt.
[ -d .deps ] && . tools/device-env.sh
summary=()
note() { summary+=("$1"); echo "== $1"; }

nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,utilization.gpu --format=csv,noheader 2>/dev/null | tee "$OUT/gpu.txt"

# ---- build
if [ ! -f "$B/build.ninja" ]; then
  meson setup "$B" -Dcuda=enabled -Dcuda-archs="$ARCHS" >"$OUT/setup.log" 2>&1 ||
    { tail -20 "$OUT/setup.log"; exit 1; }
fi
t0=$(date +%s)
ninja -C "$B" >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
note "build: $(( $(date +%s) - t0 )) s (archs $ARCHS, $(nproc) cores)"
BENCH="$B/bench/ffpa-bench"
export FFPA_BACKEND_PATH="$PWD/$B/backends/cuda"

# ---- oracle tests on the cuda backend
if ! skip tests && [ -f "$B/tests/meson.build" -o -d "$B/tests" ]; then
  FFPA_TEST_BACKEND=cuda CMOCKA_MESSAGE_OUTPUT=TAP meson test -C "$B" --suite oracle --suite validation \
    --suite unit --print-errorlogs --num-processes 4 >"$OUT/tests.log" 2>&1
  note "test suite (cuda): rc=$? cases passed/failed/skipped: $(python3 tools/count_tests.py "$B/meson-logs/testlog.json")"
  cp "$B/meson-logs/testlog.txt" "$OUT/testlog.txt" 2>/dev/null
fi

# ---- every kernel and option against the cpu backend (all elements, poisoned outputs)
CHECK_SHAPES=(
  1,2,2,77,77,64,64,l 2,4,2,130,200,128,128,cl 1,2,1,70,33,256,256,cl 1,4,4,100,100,72,72,l
  1,2,2,90,150,320,320,cl 1,2,2,65,65,512,512,l 1,2,1,33,100,1024,1024,cl 1,2,2,40,40,576,512,l
  1,2,2,64,64,8,8 1,2,2,50,80,200,200,bl 2,4,2,70,90,128,128,dl 2,2,2,70,90,512,512,bdl
  3,4,2,100,120,128,128,vcl 3,2,2,80,100,512,512,vbl 1,8,2,1,1000,128,128,l 1,8,8,3,777,512,512,cl
  1,4,1,1,500,1024,1024,l 2,2,2,16,300,320,320,cdl
)
if ! skip check; then
  "$BENCH" --backend cuda --check --no-time "${CHECK_SHAPES[@]}" >"$OUT/check.log" 2>&1
  note "check vs cpu: rc=$? fails=$(grep -c FAIL "$OUT/check.log") of ${#CHECK_SHAPES[@]}"
fi

# ---- compute-sanitizer on small shapes of every kernel (64..1024, decode, options)
SAN_SHAPES=(1,2,2,70,90,64,64,cl 1,2,1,70,90,128,128,bdl 1,1,1,33,70,256,256,cl 1,1,1,40,70,320,320,l
            1,1,1,33,70,512,512,cbl 1,1,1,33,70,1024,1024,l 2,2,2,20,40,128,128,vl 1,4,1,1,300,512,512,l)
if ! skip sanitize && command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    compute-sanitizer --tool $tool --error-exitcode 9 "$BENCH" --backend cuda --no-time --check \
      "${SAN_SHAPES[@]}" >"$OUT/san-$tool.log" 2>&1
    note "compute-sanitizer $tool: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/san-$tool.log" | tr '\n' ' ')"
  done
fi

# ---- performance beside SDPA (B=1, Hq=32, N=8192, bf16)
PERF_SHAPES=(${PERF_SHAPES:-1,32,32,8192,8192,128,128 1,32,32,8192,8192,320,320 1,32,32,8192,8192,512,512
             1,32,32,8192,8192,1024,1024 1,32,32,8192,8192,512,512,c 1,32,8,8192,8192,512,512 1,32,8,1,8192,512,512})
if ! skip bench; then
  "$BENCH" --backend cuda --csv "$OUT/ffpa.csv" "${PERF_SHAPES[@]}" >"$OUT/bench.log" 2>&1
  note "bench rc=$?"
  cat "$OUT/bench.log"
  if python3 -c "import torch" 2>/dev/null; then
    PYTHONUNBUFFERED=1 python3 bench/sdpa_bench.py --merge "$OUT/ffpa.csv" --csv "$OUT/compare.csv" >"$OUT/compare.log" 2>&1
  fi
fi

echo; echo "================ summary"
cat "$OUT/gpu.txt" 2>/dev/null
for s in "${summary[@]}"; do echo "$s"; done
grep -E "FAIL|failed" "$OUT/check.log" 2>/dev/null | head -20
[ -f "$OUT/compare.log" ] && cat "$OUT/compare.log"
