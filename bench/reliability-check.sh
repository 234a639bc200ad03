#!/bin/bash
# GPU reliability check (issue 19; not in CI), in steps (STEPS="..." picks
# them; default all): build (sm_90a), python (bench/reliability_gpu.py:
# device out of memory x1000 and tensors past 2^31 elements, forward and
# backward vs float64), suite (test_empty, test_threads, test_validation,
# test_backend on the cuda backend), stress (thousands of random forward and
# backward cases vs the float64 oracle from a fresh seed, the process's device
# memory sampled every second), sanitize (memcheck on the zero-size cases and
# on a sample of random cases).
#   bash bench/reliability-check.sh        (logs under $OUT or /tmp/ffpa-rel-check)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ffpa-rel-check}
mkdir -p "$OUT"
B=${BUILD:-build-rel}
STEPS=${STEPS:-build python suite stress sanitize}
want() { [[ " $STEPS " == *" $1 "* ]]; }
[ -d .deps ] && . tools/device-env.sh
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
if [ ! -f "$B/build.ninja" ]; then
  meson setup "$B" -Dcuda=enabled -Dcuda-archs=90a -Dhip=disabled >"$OUT/setup.log" 2>&1 || { tail -20 "$OUT/setup.log"; exit 1; }
fi
t0=$(date +%s)
ninja -C "$B" >"$OUT/build.log" 2>&1 || { grep -E "error" -A3 "$OUT/build.log" | head -40; exit 1; }
echo "== build $(( $(date +%s) - t0 )) s"
export FFPA_BACKEND_PATH="$PWD/$B/backends/cuda"

if want python; then
  FFPA_LIBRARY="$PWD/$B/libffpa.so" PYTHONPATH="$PWD/python" timeout 300 python3 bench/reliability_gpu.py \
    2>&1 | tee "$OUT/python.log" | grep -E "^(ok|FAIL|big:)|failure|Error" | head -20
fi

if want suite; then
  for t in empty threads validation backend; do
    FFPA_TEST_BACKEND=cuda CMOCKA_MESSAGE_OUTPUT=TAP timeout 300 "$B/tests/test_$t" >"$OUT/suite-$t.log" 2>&1
    echo "== test_$t on cuda: rc=$? ok=$(grep -c '^ok' "$OUT/suite-$t.log") not_ok=$(grep -c '^not ok' "$OUT/suite-$t.log")"
    grep -E "^not ok|ERROR" "$OUT/suite-$t.log" | head -5
  done
fi

if want stress; then
  seed=$(( $(date +%s) % 1000000 + 1000 ))
  echo "== stress from seed $seed"
  for t in forward backward; do
    n=$([ $t = forward ] && echo "${STRESS_FWD:-2000}" || echo "${STRESS_BWD:-600}")
    FFPA_TEST_BACKEND=cuda FFPA_TEST_RANDOM_CASES=$n FFPA_TEST_RANDOM_SEED=$seed CMOCKA_MESSAGE_OUTPUT=TAP \
      timeout 400 "$B/tests/test_$t" >"$OUT/stress-$t.log" 2>&1 &
    pid=$!
    # Device memory every second (the test is the GPU's only process; the
    # container hides its pid from --query-compute-apps): no growth case after case.
    while kill -0 $pid 2>/dev/null; do
      nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits
      sleep 1
    done >"$OUT/stress-$t-mem.txt"
    wait $pid
    rc=$?
    echo "== stress $t: $n random cases: rc=$rc cases=$(grep -c '^# case' "$OUT/stress-$t.log") not_ok=$(grep -c '^not ok' "$OUT/stress-$t.log")"
    awk 'NR == 1 {first = $1} {last = $1; if ($1 > max) max = $1} END {printf "   device memory used (MiB, %d samples): first %s, last %s, max %s\n", NR, first, last, max}' "$OUT/stress-$t-mem.txt"
    grep -E "^not ok|ERROR" "$OUT/stress-$t.log" | head -5
  done
fi

if want sanitize; then
  FFPA_TEST_BACKEND=cuda compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/test_empty" \
    >"$OUT/san-memcheck.log" 2>&1
  echo "== compute-sanitizer memcheck (test_empty on cuda): rc=$? $(grep 'ERROR SUMMARY' "$OUT/san-memcheck.log" | tail -1)"
  # A sample of the stress: random forward and backward cases under memcheck.
  for t in forward backward; do
    FFPA_TEST_BACKEND=cuda FFPA_TEST_RANDOM_CASES=${SAN_CASES:-40} FFPA_TEST_RANDOM_SEED=$(( $(date +%s) % 100000 )) \
      CMOCKA_MESSAGE_OUTPUT=TAP timeout 250 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/test_$t" \
      >"$OUT/san-$t.log" 2>&1
    echo "== compute-sanitizer memcheck (random test_$t cases on cuda): rc=$? not_ok=$(grep -c '^not ok' "$OUT/san-$t.log") $(grep 'ERROR SUMMARY' "$OUT/san-$t.log" | tail -1)"
  done
fi
