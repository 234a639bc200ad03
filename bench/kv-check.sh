#!/bin/bash
# GPU check of the KV-cache path (serving), in steps (STEPS="..." picks them;
# default all): build (sm_90a), check (ffpa-bench --decode --check vs cpu at
# awkward sizes), tests (the suite on the cuda backend, default kernels and
# FFPA_CUDA_KERNEL=generic; TEST_KERNELS picks), sanitize (memcheck, racecheck, synccheck on the
# new kernels), python (the package's GPU tests, CUDA-graph replay included),
# hipnv (the HIP sources' KV path on this GPU through __HIP_PLATFORM_NVIDIA__),
# perf (decode rows with the same-run copy ceiling, a blocks-per-SM sweep,
# the generic forward's prefill rows, SDPA beside the dense rows), mla (the
# Hopper MLA kernel's rows beside the generic kernels' and the same-run copy
# and GEMM ceilings, page sizes, fp16, repeated runs).
#   bash bench/kv-check.sh      (logs under $OUT or /tmp/ffpa-kv-check)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ffpa-kv-check}
mkdir -p "$OUT"
B=${BUILD:-build-kv}
STEPS=${STEPS:-build check tests sanitize python hipnv perf mla}
want() { [[ " $STEPS " == *" $1 "* ]]; }
[ -d .deps ] && . tools/device-env.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
if [ ! -f "$B/build.ninja" ]; then
  meson setup "$B" -Dcuda=enabled -Dcuda-archs=90a -Dhip=disabled >"$OUT/setup.log" 2>&1 || { tail -20 "$OUT/setup.log"; exit 1; }
fi
t0=$(date +%s)
ninja -C "$B" >"$OUT/build.log" 2>&1 || { grep -E "error" -A3 "$OUT/build.log" | head -40; exit 1; }
echo "== build $(( $(date +%s) - t0 )) s"
export FFPA_BACKEND_PATH="$PWD/$B/backends/cuda"
BENCH="$B/bench/ffpa-bench"

if want check; then
  CHECK=(1,8,2,1,1,64,64,16 3,8,2,1,17,128,128,16,x 2,32,8,1,5000,128,128,64 2,4,4,4,300,256,256,16,ca
         2,8,1,16,200,512,512,16,ca 2,4,2,1,3000,1024,1024,256 3,128,1,1,700,576,512,64,ma 2,64,1,2,300,576,512,16,mac
         2,16,1,1,100000,576,512,64,m 1,32,8,300,500,128,128,64,ca 2,8,8,1,999,128,128,16,d 2,32,8,1,4097,512,512,64
         2,8,2,3,1000,1024,1024,48,cax 4,8,2,1,777,256,256,32,x
         5,128,1,1,65,576,512,64,m 3,32,1,2,1001,576,512,16,mc 4,64,1,4,300,576,512,256,mcx 2,16,1,1,17,576,512,16,ma
         1,128,1,4,129,576,512,32,mca 7,16,1,1,3000,576,512,64,mx 2,8,1,1,500,576,512,64,md)
  "$BENCH" --backend cuda --decode --check --reps 10 "${CHECK[@]}" >"$OUT/check.log" 2>&1
  echo "== decode check vs cpu: rc=$? pass=$(grep -c ': pass' "$OUT/check.log") fail=$(grep -c FAIL "$OUT/check.log") of ${#CHECK[@]}"
  grep -E "FAIL|rror" "$OUT/check.log" | head -5
fi

if want tests; then
  for kern in ${TEST_KERNELS:-auto generic}; do
    FFPA_CUDA_KERNEL=$kern FFPA_TEST_BACKEND=cuda timeout 300 meson test -C "$B" --suite oracle --suite validation \
      --suite unit --print-errorlogs --num-processes 4 >"$OUT/tests-$kern.log" 2>&1
    echo "== test suite (cuda, FFPA_CUDA_KERNEL=$kern): rc=$? $(python3 tools/count_tests.py "$B/meson-logs/testlog.json")"
    grep -E "^not ok" "$B/meson-logs/testlog.txt" | head -10
  done
fi

if want sanitize; then
  SAN=(1,8,2,1,300,128,128,16,x 1,32,1,2,200,576,512,64,mac 1,4,4,3,130,1024,1024,16,ca 2,8,8,1,100,64,64,16,d
       1,64,1,1,300,576,512,48,m 2,128,1,2,257,576,512,16,mc 3,16,1,1,130,576,512,256,mx)
  for tool in memcheck racecheck synccheck; do
    compute-sanitizer --tool $tool --error-exitcode 9 "$BENCH" --backend cuda --decode --reps 10 "${SAN[@]}" \
      >"$OUT/san-$tool.log" 2>&1
    rc=$?
    echo "== compute-sanitizer $tool: rc=$rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/san-$tool.log" | tail -1)"
    [ $rc -ne 0 ] && grep -E "^=========" "$OUT/san-$tool.log" | grep -vE "Saved host backtrace|libcuda|libffpa-cuda.so|ffpa-bench|libc.so" | head -24
  done
fi

if want python; then
  FFPA_LIBRARY="$PWD/$B/libffpa.so" PYTHONPATH="$PWD/python" timeout 400 python3 -m pytest -q -p no:cacheprovider \
    python/tests/test_kvcache.py python/tests/test_cuda.py >"$OUT/python.log" 2>&1
  echo "== python GPU tests: rc=$? $(tail -1 "$OUT/python.log")"
  grep -E "^FAILED|Error" "$OUT/python.log" | head -5
fi

if want hipnv; then
  t0=$(date +%s)
  bash backends/hip/nvidia-check.sh build build-hipnv >"$OUT/hipnv-build.log" 2>&1
  echo "== HIP on NVIDIA build: rc=$? $(( $(date +%s) - t0 )) s"
  OUT="$OUT" HIPNV_STEPS="kvcache forward" bash backends/hip/nvidia-check.sh test build-hipnv 2>&1 | grep "^==" | head -4
fi

if want perf; then
  PERF=(8,32,8,1,32768,128,128,64 8,32,8,1,32768,256,256,64 8,32,8,1,32768,512,512,64 8,32,8,1,32768,1024,1024,64
        8,32,8,4,32768,128,128,64,c 8,32,8,4,8192,512,512,64,c 8,8,8,1,32768,128,128,64 8,32,8,1,32768,128,128,16
        8,32,8,1,32768,128,128,256 64,32,8,1,32768,128,128,64,x 64,32,8,1,32768,512,512,64,x
        128,16,1,1,8192,576,512,64,m 64,128,1,1,8192,576,512,64,m 32,128,1,2,4096,576,512,64,mc
        64,128,1,1,32768,576,512,64,mx 1,32,8,2048,8192,128,128,64,ca 1,32,8,2048,8192,512,512,64,ca)
  "$BENCH" --backend cuda --decode --reps 20 --csv "$OUT/decode.csv" "${PERF[@]}" 2>&1 | tee "$OUT/decode.log"
  for n in 1 3 4; do
    FFPA_KV_BLOCKS_PER_SM=$n "$BENCH" --backend cuda --decode --reps 20 8,32,8,1,32768,128,128,64 \
      8,32,8,1,32768,256,256,64 128,16,1,1,8192,576,512,64,m 2>&1 | tail -3 | sed "s/^/blocks\/SM=$n /"
  done | tee "$OUT/sweep.log"
  FFPA_CUDA_KERNEL=generic "$BENCH" --backend cuda --reps 10 1,32,32,8192,8192,320,320 1,32,32,8192,8192,512,512 \
    1,32,32,8192,8192,1024,1024 2>&1 | tail -3 | tee "$OUT/generic.log"
  DENSE=(8,32,8,1,32768,128,128 8,32,8,1,32768,512,512 8,128,1,1,8192,576,512)
  "$BENCH" --backend cuda --reps 20 --csv "$OUT/dense.csv" "${DENSE[@]}" 2>&1 | tail -3
  python3 bench/sdpa_bench.py --merge "$OUT/dense.csv" --csv "$OUT/sdpa.csv" 2>&1 | tail -5 | tee "$OUT/sdpa.log"
fi

if want mla; then
  MLA=(64,128,1,1,8192,576,512,64,m 32,128,1,2,4096,576,512,64,mc 128,16,1,1,8192,576,512,64,m
       64,128,1,1,32768,576,512,64,mx 64,128,1,1,8192,576,512,16,m 64,128,1,1,8192,576,512,256,m
       128,16,1,1,8192,576,512,16,m 128,16,1,1,8192,576,512,256,m 64,64,1,1,8192,576,512,64,m
       64,32,1,4,8192,576,512,64,mc 8,128,1,1,8192,576,512,64,md)
  python3 bench/sdpa_bench.py --gemm 8,128,1,1,8192,576,512 2>&1 | grep -E "gemm|device" | tee "$OUT/gemm.log"
  "$BENCH" --backend cuda --decode --reps 20 --csv "$OUT/mla.csv" "${MLA[@]}" 2>&1 | tee "$OUT/mla.log"
  "$BENCH" --backend cuda --decode --reps 20 --dtype f16 64,128,1,1,8192,576,512,64,m 128,16,1,1,8192,576,512,64,m \
    2>&1 | tail -2 | tee -a "$OUT/mla.log"
  FFPA_CUDA_KERNEL=generic "$BENCH" --backend cuda --decode --reps 10 "${MLA[@]:0:4}" 2>&1 | tail -4 |
    sed 's/^/generic /' | tee -a "$OUT/mla.log"
  python3 bench/sdpa_bench.py --gemm 8,128,1,1,8192,576,512 2>&1 | grep gemm | sed 's/^/after: /' | tee -a "$OUT/gemm.log"
fi
