#!/bin/bash
# Runs the HIP backend's sources on an NVIDIA GPU: the same .hip/.h files,
# compiled by nvcc for __HIP_PLATFORM_NVIDIA__ (compat/hip_on_cuda.h stands
# in for HIP's NVIDIA-platform runtime header, which CUDA 13 no longer
# compiles), arch layer = the portable FMA path of arch_portable.h.
#
#   bash backends/hip/nvidia-check.sh build [BUILD]   core + tests (meson, no
#        cuda/hip plugin) and BUILD/backends/hip/libffpa-hip.so (nvcc);
#        copies libcmocka beside the tests so the build runs where cmocka is
#        not installed (the GPU machine).
#   bash backends/hip/nvidia-check.sh test [BUILD]    oracle tests with
#        FFPA_TEST_BACKEND=hip (forward, validation, backward, kvcache, and backward64k:
#        the backward again with FFPA_BWD_SMEM_LIMIT=65536, i.e. the
#        small-shared-memory kernels a 64 KiB-LDS AMD part runs), ffpa-bench
#        --check (hip vs cpu) on shapes covering every forward instantiation
#        and option, compute-sanitizer memcheck on small backwards (ffpa-run
#        vs the float64 oracle; both backward configurations). Logs to $OUT
#        (or /tmp).
# Environment: NVCC (nvcc), HIPNV_SM (90: the SASS target), HIPNV_STEPS
# (default "backward backward64k forward validation kvcache bench memcheck": the test steps).
set -u
cd "$(dirname "$0")/../.."
STEP=${1:-build}
B=${2:-build-hipnv}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
SM=${HIPNV_SM:-90}
LOG=${OUT:-/tmp/ffpa-hipnv}
mkdir -p "$LOG"

if [ "$STEP" = build ]; then
  set -e
  [ -f "$B/build.ninja" ] || meson setup "$B" -Dcuda=disabled -Dhip=disabled >/dev/null
  ninja -C "$B" >/dev/null
  P="$B/backends/hip"
  mkdir -p "$P/nv"
  CUDA_INC=$(dirname "$(dirname "$NVCC")")/include
  INC="-Ibackends/hip -Ibackends/hip/compat -Ibackends/gpu -Iapi -Icommon"
  pids=()
  for f in fwd_launch fwd_inst_f16_small fwd_inst_f16_large fwd_inst_bf16_small fwd_inst_bf16_large \
           bwd_launch bwd_aux bwd_inst_f16 bwd_inst_bf16 kv_launch kv_inst_f16 kv_inst_bf16; do
    "$NVCC" -x cu -std=c++17 -O3 -D__HIP_PLATFORM_NVIDIA__ --expt-relaxed-constexpr \
      -gencode "arch=compute_$SM,code=sm_$SM" -Xcompiler -fPIC,-fvisibility=hidden -Xptxas -v $INC \
      -c "backends/hip/$f.hip" -o "$P/nv/$f.o" >"$P/nv/$f.ptxas.log" 2>&1 &
    pids+=($!)
  done
  for c in backends/hip/runtime_hip.c backends/gpu/gpu_host.c backends/gpu/gpu_calls.c common/plan.c common/env.c common/kv_sched.c; do
    cc -std=c11 -O2 -fPIC -fvisibility=hidden -D_POSIX_C_SOURCE=200809L -D__HIP_PLATFORM_NVIDIA__ \
      -I"$CUDA_INC" $INC -c "$c" -o "$P/nv/$(basename "$c" .c).o"
  done
  for p in "${pids[@]}"; do wait "$p" || { cat "$P"/nv/*.ptxas.log | grep -E "error" | head -30; exit 1; }; done
  "$NVCC" -shared -o "$P/libffpa-hip.so" "$P"/nv/*.o
  mkdir -p "$B/lib"
  cp -L "$(ldconfig -p | awk '/libcmocka.so.0 /{print $NF; exit}')" "$B/lib/" 2>/dev/null || true
  grep -h -E "registers|spill" "$P"/nv/fwd_inst_*.ptxas.log | sort | uniq -c | sort -rn | head -8
  echo "backward:"
  awk '/Compiling entry function/ { match($0, /_Z[^'"'"' ]*/); k = substr($0, RSTART, RLENGTH); f = "" }
       /bytes stack frame/ && k != "" { f = $1 " B stack, " $5 " B spill stores" }
       /Used [0-9]+ registers/ && k != "" { match($0, /Used [0-9]+ registers/); print substr($0, RSTART, RLENGTH) ", " f ": " k; k = "" }' \
    "$P"/nv/bwd_*.ptxas.log | sort -u
  echo "built $P/libffpa-hip.so (HIP on CUDA, sm_$SM)"
  exit 0
fi

# ---- test
export LD_LIBRARY_PATH="$PWD/$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export FFPA_BACKEND_PATH="$PWD/$B/backends/hip"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
STEPS=${HIPNV_STEPS:-backward backward64k forward validation kvcache bench memcheck}
want() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }
rc_all=0
for t in $STEPS; do
  # backward64k: test_backward with the backward planner capped at 64 KiB.
  case $t in forward | validation | backward | kvcache) prog=$t lim= ;; backward64k) prog=backward lim=65536 ;; *) continue ;; esac
  t0=$(date +%s)
  FFPA_BWD_SMEM_LIMIT=$lim FFPA_TEST_BACKEND=hip timeout "${HIPNV_TEST_TIMEOUT:-200}" "$B/tests/test_$prog" \
    >"$LOG/test_$t.log" 2>&1
  rc=$?
  [ $rc -ne 0 ] && rc_all=1
  echo "== test_$prog (FFPA_TEST_BACKEND=hip${lim:+ FFPA_BWD_SMEM_LIMIT=$lim}): rc=$rc, $(( $(date +%s) - t0 )) s," \
       "$(grep -c '^\[       OK \]' "$LOG/test_$t.log") ok, $(grep -c '^\[  FAILED  \]' "$LOG/test_$t.log") failed lines," \
       "$(grep -c 'refused by hip as unsupported' "$LOG/test_$t.log") refusals"
  grep -E "FAILED|SKIP|error|refused" "$LOG/test_$t.log" | head -12
done
SHAPES=(1,2,2,77,77,64,64,l 2,4,2,130,200,128,128,cl 1,2,1,70,33,256,256,cl 1,4,4,100,100,72,72,l
        1,2,2,90,150,320,320,cl 1,2,2,65,65,512,512,l 1,2,1,33,100,1024,1024,cl 1,2,2,40,40,576,512,l
        2,4,2,70,90,128,128,dl 2,2,2,70,90,512,512,bdl 3,4,2,100,120,128,128,vcl 3,2,2,80,100,512,512,vbl
        1,8,2,1,1000,128,128,l 1,8,8,3,777,512,512,cl 1,4,1,1,500,1024,1024,l 2,2,2,16,300,320,320,cdl)
if want bench && [ -x "$B/bench/ffpa-bench" ]; then
  timeout 120 "$B/bench/ffpa-bench" --backend hip --check --no-time "${SHAPES[@]}" >"$LOG/check.log" 2>&1
  rc=$?
  [ $rc -ne 0 ] && rc_all=1
  echo "== ffpa-bench --check hip vs cpu: rc=$rc, FAIL lines: $(grep -c FAIL "$LOG/check.log") of ${#SHAPES[@]} shapes"
  tail -4 "$LOG/check.log"
fi
# Small backwards (forward + backward, checked against the float64 oracle)
# under compute-sanitizer memcheck: Bc=64 and Bc=32 dK/dV, dQ with dbias,
# dropout, GQA, causal with Nq != Nkv; then the same with
# FFPA_BWD_SMEM_LIMIT=65536 (small-shared-memory dK/dV and dQ).
if want memcheck && command -v compute-sanitizer >/dev/null && [ -x "$B/tools/ffpa-run" ]; then
  n=0
  for lim in "" 65536; do
    for args in "-b 2 --hq 4 --hkv 2 --nq 77 --nkv 90 -d 64 --causal --bias --dropout 0.1" \
                "-b 1 --hq 2 --hkv 1 --nq 40 --nkv 33 -d 512 --causal"; do
      n=$((n + 1))
      FFPA_BWD_SMEM_LIMIT=$lim timeout "${HIPNV_SAN_TIMEOUT:-120}" compute-sanitizer --tool memcheck --error-exitcode 9 \
        "$B/tools/ffpa-run" --backend hip --iters 1 --check $args >"$LOG/memcheck-$n.log" 2>&1
      rc=$?
      [ $rc -ne 0 ] && rc_all=1
      echo "== memcheck${lim:+ FFPA_BWD_SMEM_LIMIT=$lim} ffpa-run $args: rc=$rc; $(grep -E 'ERROR SUMMARY' "$LOG/memcheck-$n.log")"
      grep -E -i "backward|forward|check|error" "$LOG/memcheck-$n.log" | grep -v "ERROR SUMMARY" | head -6
    done
  done
fi
exit $rc_all
