#!/bin/bash
# GPU check of the KV-cache path (serving): build (sm_90a), the test suite on
# the cuda backend, ffpa-bench --decode --check at awkward sizes,
# compute-sanitizer memcheck/racecheck on the new kernels, then the decode
# benchmark with the same-run copy ceiling, and SDPA beside the dense rows.
#   bash bench/kv-check.sh      (logs under $OUT or /tmp/ffpa-kv-check)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ffpa-kv-check}
mkdir -p "$OUT"
B=${BUILD:-build-kv}
[ -d .deps ] && . tools/device-env.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
if [ ! -f "$B/build.ninja" ]; then
  meson setup "$B" -Dcuda=enabled -Dcuda-archs=90a -Dhip=disabled >"$OUT/setup.log" 2>&1 || { tail -20 "$OUT/setup.log"; exit 1; }
fi
t0=$(date +%s)
ninja -C "$B" >"$OUT/build.log" 2>&1 || { grep -E "error" -A3 "$OUT/build.log" | head -40; exit 1; }
echo "== build $(( $(date +%s) - t0 )) s"
grep -A2 "kv_attn" "$OUT/build.log" | grep -E "spill|Used" | head -4
export FFPA_BACKEND_PATH="$PWD/$B/backends/cuda"
BENCH="$B/bench/ffpa-bench"

CHECK=(1,8,2,1,1,64,64,16 3,8,2,1,17,128,128,16,x 2,32,8,1,5000,128,128,64 2,4,4,4,300,256,256,16,ca
       2,8,1,16,200,512,512,16,ca 2,4,2,1,3000,1024,1024,256 3,128,1,1,700,576,512,64,ma 2,64,1,2,300,576,512,16,mac
       2,16,1,1,100000,576,512,64,m 1,32,8,300,500,128,128,64,ca 2,8,8,1,999,128,128,16,d 2,32,8,1,4097,512,512,64)
"$BENCH" --backend cuda --decode --check --reps 10 "${CHECK[@]}" >"$OUT/check.log" 2>&1
echo "== decode check vs cpu: rc=$? pass=$(grep -c ': pass' "$OUT/check.log") fail=$(grep -c FAIL "$OUT/check.log") of ${#CHECK[@]}"
grep -E "FAIL|error|rror" "$OUT/check.log" | head -5

FFPA_TEST_BACKEND=cuda timeout 400 meson test -C "$B" --suite oracle --suite validation --suite unit \
  --print-errorlogs --num-processes 4 >"$OUT/tests.log" 2>&1
echo "== test suite (cuda): rc=$? $(python3 tools/count_tests.py "$B/meson-logs/testlog.json")"
grep -E "^not ok|FAIL" "$B/meson-logs/testlog.txt" | head -10

SAN=(1,8,2,1,300,128,128,16,x 1,32,1,2,200,576,512,64,mac 1,4,4,3,130,1024,1024,16,ca 2,8,8,1,100,64,64,16,d)
for tool in memcheck racecheck; do
  compute-sanitizer --tool $tool --error-exitcode 9 "$BENCH" --backend cuda --decode --reps 10 "${SAN[@]}" >"$OUT/san-$tool.log" 2>&1
  echo "== compute-sanitizer $tool: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/san-$tool.log" | tail -1)"
done

PERF=(8,32,8,1,32768,128,128,64 8,32,8,1,32768,256,256,64 8,32,8,1,32768,512,512,64 8,32,8,1,32768,1024,1024,64
      8,32,8,4,32768,128,128,64,c 8,32,8,4,8192,512,512,64,c 8,8,8,1,32768,128,128,64 8,32,8,1,32768,128,128,16
      8,32,8,1,32768,128,128,256 64,32,8,1,32768,128,128,64,x 64,32,8,1,32768,512,512,64,x
      128,16,1,1,8192,576,512,64,m 64,128,1,1,8192,576,512,64,m 32,128,1,2,4096,576,512,64,mc
      64,128,1,1,32768,576,512,64,mx 8,128,1,1,8192,576,512,64,m 1,32,8,2048,8192,128,128,64,ca
      1,32,8,2048,8192,512,512,64,ca)
"$BENCH" --backend cuda --decode --reps 20 --csv "$OUT/decode.csv" "${PERF[@]}" 2>&1 | tee "$OUT/decode.log"

# Dense forward (ffpa_forward: decode runs the same kernels), beside SDPA in the same session.
DENSE=(8,32,8,1,32768,128,128 8,32,8,1,32768,512,512 8,128,1,1,8192,576,512 1,32,8,2048,10240,128,128,c 1,32,8,2048,10240,512,512,c)
"$BENCH" --backend cuda --reps 20 --csv "$OUT/dense.csv" "${DENSE[@]}" 2>&1 | tee "$OUT/dense.log"
python3 bench/sdpa_bench.py --merge "$OUT/dense.csv" --csv "$OUT/sdpa.csv" 2>&1 | tail -12 | tee "$OUT/sdpa.log"
