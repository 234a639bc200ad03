#!/bin/bash
# The one script for the GPU machine: named steps, any combination in one call.
#
#   bash bench/gpu.sh [STEP...]          (default: build test check sanitize bench sdpa)
#
#   build        core, tests, ffpa-bench, CUDA plugin (ARCHS, default 90a) in BUILD (default build-gpu)
#   test         the C suites on the cuda backend, default kernels and generic ones (TEST_KERNELS)
#   check        ffpa-bench --check vs the cpu backend, every element, poisoned outputs: forward
#                (auto and FFPA_CUDA_KERNEL=sm90), backward (bf16, f16; generic: dQ in the dK/dV kernel,
#                the split launch, the 64 KiB kernels), decode and MLA
#   sanitize     compute-sanitizer memcheck, racecheck, synccheck on small forward, backward, decode shapes
#   bench        forward (KERNELS, default "auto generic"), backward (also deterministic) and decode rows;
#                CSVs in OUT
#   sdpa         PyTorch SDPA on the bench step's forward, backward and dense-decode rows and the GEMM
#                ceiling (bf16 8192^3 matmul); the decode rows carry their own same-run copy ceiling
#   fa2          the generic mma.sync kernels (FFPA_CUDA_KERNEL=generic) beside FlashAttention-2 (SDPA forced to
#                its flash backend), forward and backward, FA2_SHAPES (default D = 64, 128, 256, plain and causal)
#   mla          the Hopper MLA decode kernel: page sizes, fp16, beside the generic kernels
#   profile      Nsight Compute on the forward kernels (PROFILE_SHAPES) and/or the backward
#                (PROFILE_PASSES="fwd bwd", PROFILE_BWD_SHAPES; PROFILE_BWD_KERNELS, default sm90, or generic);
#                PROFILE_SOURCE=1: also instructions and stalls by source line (bench/py/ncu_source.py;
#                build with NVCC_APPEND_FLAGS=-lineinfo for the line numbers)
#   tune         ffpa-tune (TUNE_PASS fwd|bwd|both, default both; TUNE_BUDGET s) into BUILD/ffpa/tuning;
#                checks with it
#   tune-arch    the architecture tables (cuda-sm_<arch>.json) for TUNE_ARCHS (default "80 86"), each
#                tuned under FFPA_CUDA_AS_ARCH and checked with it (forward and backward vs the cpu backend)
#   grid         the benchmark grid (with and without the tuning table, SDPA) in OUT/results/<device>
#   reliability  device OOM x1000 and > 2^31 elements (py/reliability_gpu.py), the zero-size, thread,
#                validation suites, STRESS_FWD/STRESS_BWD random cases with device memory sampled, and
#                memcheck on a sample
#   python       the package's tests on this GPU and the training check (python/train_check.py)
#   cp           context parallelism (bench/py/context_parallel.py) on 1, 2, 4, 8 GPUs, as many as the
#                machine has: NCCL equivalence checks, then ring / all-gather against one GPU (CP_SHAPES N:H)
#   opencl       the OpenCL backend on this GPU through NVIDIA's OpenCL driver (registered with the ICD
#                loader here): its test suites (OCL_TESTS: meson test arguments, default --suite opencl),
#                --check of the forward/backward shapes against the cpu backend, and the forward (the
#                OCL_KERNELS kernels, default mma tiled portable; OCL_DIAG: the matrix kernel's diagnostic
#                builds, e.g. "1 2 3") beside the cuda backend's generic and default kernels and the fp32
#                SGEMM ceiling (OCL_PERF shapes); OCL_PERF_ONLY=1 skips the suites and checks
#   opencl-sass  the OpenCL programs' SASS from NVIDIA's OpenCL JIT beside the CUDA driver's JIT of the same PTX
#                (bench/py/jit_sass.py): instructions and shared-memory accesses by width per kernel, flagged where
#                OpenCL's is longer or narrower (the tiled forward's 1.88x gap was that: docs/notes/opencl.md)
#   hipnv        the HIP backend's sources on this GPU (__HIP_PLATFORM_NVIDIA__, backends/hip/nvidia-check.sh)
#   ab           same-run A/B: this tree against a fresh build of it with AB_BASE's files laid over
#                (AB_SHAPES, default the backward rows; AB_FLAGS, default --backward; AB_ROUNDS) in OUT/ab.txt
#   diag         the sm90 diagnostic builds, timing only, DIAG_SHAPES (DIAG=1: forward without the DSMEM exchange;
#                2: forward timeline; 3: backward without the dQ reductions)
#
# Logs and CSVs go to OUT (default /tmp/ffpa-gpu); each step prints "== ..." lines, a summary ends.
# The machine has no apt: cmocka and cJSON travel in .deps/ (tools/device-deps.sh).
set -u
OUT=$(mkdir -p "${OUT:-/tmp/ffpa-gpu}" && cd "${OUT:-/tmp/ffpa-gpu}" && pwd) # absolute: steps change directory
cd "$(dirname "$0")/.."
B=${BUILD:-build-gpu}
STEPS=${*:-build test check sanitize bench sdpa}
[ -d .deps ] && . tools/device-env.sh
export PYTHONUNBUFFERED=1
BENCH="$B/bench/ffpa-bench"
summary=()
note() { summary+=("$1"); echo "== $1"; }
fails() { echo "$(grep -c FAIL "$1") FAIL of $2"; }
san_summary() { grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$1" | tail -1; }
device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,memory.used --format=csv,noheader |
  tee "$OUT/gpu.txt"

# ------------------------------------------------------------------ shapes
# B,Hq,Hkv,Nq,Nkv,Dqk,Dv[,flags]: c causal, b bias, d dropout, v varlen, l lse, r deterministic,
# g dbias (bias broadcast over the batch), o gradients accumulated in the output dtype, tX Q drawn
# from [-X, X) (large scores: peaked rows).
FWD_CHECK=(1,2,2,77,77,64,64,l 2,4,2,130,200,128,128,cl 1,2,1,70,33,256,256,cl 1,4,4,100,100,72,72,l
  1,2,2,90,150,320,320,cl 1,2,2,65,65,512,512,l 1,2,2,300,300,512,512,cl 1,2,2,50,80,200,200,bl
  2,4,2,70,90,128,128,dl 2,2,2,70,90,512,512,bdl 3,4,2,100,120,128,128,vcl 3,2,2,80,100,512,512,vbl
  1,8,8,3,777,512,512,cl 2,2,2,16,300,320,320,cdl 1,3,1,200,129,384,384,cl 1,2,2,129,257,448,448,l
  1,2,2,40,40,264,264,l 1,2,2,100,100,512,384,l 1,2,1,1000,1000,512,512,c 1,2,1,70,150,1024,1024,cl
  1,2,2,90,90,768,768,bl 1,2,2,100,100,576,512,cl 2,2,2,60,100,1024,1024,vdl 1,2,2,33,70,536,536,l
  1,2,2,130,200,768,768,cl 2,4,2,90,150,696,648,l 3,2,2,80,100,768,768,vcdl 1,8,8,3,777,600,600,cl
  1,2,1,1000,1000,768,768,c 2,2,2,150,150,640,640,cs30bl
  1,2,2,64,64,8,8 1,8,2,1,1000,128,128,l 1,4,1,1,500,1024,1024,l
  1,2,2,300,300,128,128,w40.7l 2,4,2,200,330,320,320,cw100l 1,2,1,130,90,512,512,w5.0l 1,2,2,200,200,256,256,s5l
  2,2,2,150,150,512,512,cs30bl 1,4,2,200,260,128,128,al 3,2,2,100,120,512,512,vcw33s20adl 1,8,2,2,900,128,128,w64al
  2,2,1,150,170,192,128,cl 1,2,2,257,257,128,128,bdl
  1,2,2,200,333,64,64,cl 2,4,2,190,90,64,64,bdl 3,4,2,100,500,48,48,vcl 2,2,2,250,250,64,64,cs20al 1,8,1,500,200,32,32,cdl
  1,2,2,190,260,64,64,cl 2,4,2,97,193,256,256,cl
  1,4,2,257,300,512,512,ct30l 1,2,2,200,260,1024,1024,t30l 1,2,2,150,150,320,320,t30l 1,2,2,90,90,768,768,t200l
  1,2,2,40,40,1024,1024,l 1,2,2,100,128,1024,1024,cl 1,3,1,150,300,384,384,cl 2,2,2,64,64,448,448,l)
BWD_CHECK=(1,2,2,77,77,64,64 2,4,2,130,200,128,128,c 1,2,1,70,33,256,256,c 1,2,2,90,150,320,320,c
  2,4,2,130,200,320,264,c 1,2,2,100,100,264,320,o 3,2,2,80,100,296,296,vcbd 1,2,1,200,260,320,320,w50s20a
  1,2,2,300,300,320,320,r 1,2,2,129,65,288,288,cg
  1,2,2,300,300,512,512,c 3,4,2,100,120,128,128,vc 3,2,2,80,100,512,512,v 1,8,8,3,777,512,512,c
  1,3,1,200,129,384,384,c 1,2,2,129,257,448,448 1,2,2,100,100,512,384 1,2,1,1000,1000,512,512,c
  1,2,1,70,150,1024,1024,c 1,2,2,90,90,768,768 1,2,2,100,100,576,512,c 2,2,2,60,100,1024,1024,v
  1,2,2,33,70,536,536 2,2,2,70,90,512,512,bd 1,4,1,256,512,1024,1024,c 1,2,2,64,64,1024,640
  1,2,1,100,130,320,320,cbd 2,4,2,100,120,128,128,vbd 1,2,2,90,90,768,768,d 1,2,2,65,65,512,512,b
  1,4,2,700,700,128,128,r 1,2,1,300,500,512,512,cr 1,2,2,500,300,320,320,cr 1,2,2,300,300,1024,1024,cr
  3,4,2,300,400,256,256,vcr 2,4,1,257,129,576,512,cbdr
  1,2,2,90,150,320,320,cg 2,2,1,130,200,512,512,gd 1,2,1,100,130,1024,1024,cg 1,4,2,300,300,128,128,go
  1,2,2,200,260,512,512,o 1,2,1,300,500,512,512,cor 1,2,2,300,300,1024,1024,or 2,2,2,70,90,768,768,vgo
  1,2,2,200,300,512,512,gr 2,4,2,200,200,256,256,cgr 1,2,2,129,257,448,448,cgo
  1,2,2,300,300,128,128,w40.7 2,4,2,200,330,320,320,cw100 1,2,1,130,90,512,512,w5.0 1,2,2,200,200,256,256,s5
  2,2,2,150,150,512,512,cs30g 1,4,2,200,260,128,128,a 3,2,2,100,120,512,512,vcw33s20ad 1,2,2,200,200,1024,1024,cw64s10ar
  1,2,2,100,130,800,800,c 2,2,1,90,70,960,832,vbd 1,4,2,150,150,1024,576,g 1,2,2,130,130,896,896,r
  1,2,1,70,200,128,128,c 1,2,2,90,65,128,128 2,4,2,300,129,128,64,c 1,2,2,129,257,64,128 1,3,1,50,1,128,128
  3,2,2,100,130,256,256 2,4,2,90,70,192,192,o 2,2,1,77,150,256,256,bd 1,2,2,150,150,256,256,r
  2,4,2,150,200,64,64,c 3,4,2,100,130,48,48,vbd 1,2,1,200,260,32,32,cw40s10a 1,4,2,129,300,64,40,d
  1,2,2,257,100,64,64,g 2,4,2,150,230,96,96,c 1,2,1,130,200,80,80 3,2,2,100,170,112,112,v 1,2,2,129,300,72,104,c
  2,4,2,130,190,160,224,c 1,2,1,100,257,200,200 3,2,2,90,130,256,136,v)
# Decode: B,Hq,Hkv,Nq,Nkv,Dqk,Dv,page[,flags]: c causal, a append, m MLA, x mixed lengths, d dense.
KV_CHECK=(1,8,2,1,1,64,64,16 3,8,2,1,17,128,128,16,x 2,32,8,1,5000,128,128,64 2,4,4,4,300,256,256,16,ca
  2,8,1,16,200,512,512,16,ca 2,4,2,1,3000,1024,1024,256 3,128,1,1,700,576,512,64,ma
  2,64,1,2,300,576,512,16,mac 2,16,1,1,100000,576,512,64,m 1,32,8,300,500,128,128,64,ca
  2,8,8,1,999,128,128,16,d 2,32,8,1,4097,512,512,64 2,8,2,3,1000,1024,1024,48,cax 4,8,2,1,777,256,256,32,x
  5,128,1,1,65,576,512,64,m 3,32,1,2,1001,576,512,16,mc 4,64,1,4,300,576,512,256,mcx
  2,16,1,1,17,576,512,16,ma 1,128,1,4,129,576,512,32,mca 7,16,1,1,3000,576,512,64,mx 2,8,1,1,500,576,512,64,md)
FWD_SAN=(1,2,1,70,90,128,128,bdl 1,1,1,33,70,256,256,cl 1,1,1,40,70,320,320,l 1,1,1,33,70,512,512,cbl
  2,2,2,20,40,128,128,vl 1,1,1,40,140,1024,1024,cl 1,4,1,1,300,512,512,l 1,2,1,70,130,320,320,cw20s10al
  1,2,1,70,130,768,768,cbdl 2,2,2,30,70,696,648,vl 1,2,1,200,330,64,64,cl 2,2,2,100,150,64,64,dl
  1,2,1,70,130,384,384,cl)
BWD_SAN=(1,2,1,70,130,320,320,c 3,2,2,40,70,296,296,vcbd 1,2,2,130,130,320,320,r 1,2,2,70,100,264,320,o 1,1,1,40,140,1024,1024,c 1,1,1,90,200,768,768,c 2,2,2,20,40,128,128,v
  1,1,1,40,70,512,512,bd 1,2,1,200,260,512,512,cr 1,1,1,130,200,1024,1024,r 1,2,1,70,130,512,512,cg
  1,1,1,40,140,1024,1024,go 2,2,2,60,70,256,256,gr 1,2,1,70,130,320,320,cw20s10a 1,2,1,70,130,256,256,c
  2,4,1,100,300,256,256,vc 1,2,1,70,130,800,800,cbd 2,2,2,40,90,960,960,v 1,2,1,70,200,128,128,c 1,2,2,300,129,128,64,c
  2,2,1,70,130,64,64,cbd 2,2,2,50,90,48,48,v 1,2,1,70,200,96,96,c 2,2,2,50,150,112,112,v
  1,2,2,70,90,200,160)
KV_SAN=(1,8,2,1,300,128,128,16,x 1,32,1,2,200,576,512,64,mac 1,4,4,3,130,1024,1024,16,ca 2,8,8,1,100,64,64,16,d
  1,64,1,1,300,576,512,48,m 2,128,1,2,257,576,512,16,mc 3,16,1,1,130,576,512,256,mx)
FWD_PERF=(${FWD_PERF:-1,32,32,8192,8192,128,128 1,32,32,8192,8192,256,256 1,32,32,8192,8192,320,320
  1,32,32,8192,8192,512,512 1,32,32,8192,8192,512,512,c 1,32,8,8192,8192,512,512 1,32,32,8192,8192,768,768
  1,32,32,8192,8192,1024,1024 1,32,8,1,8192,512,512})
BWD_PERF=(${BWD_PERF:-1,32,32,8192,8192,128,128 1,32,32,8192,8192,320,320 1,32,32,8192,8192,512,512
  1,32,32,8192,8192,512,512,c 1,32,8,8192,8192,512,512 1,32,32,8192,8192,1024,1024})
# The backward's options at D=512: bias, dropout, dbias, output-dtype accumulation, deterministic dbias.
OPT_PERF=(${OPT_PERF:-1,32,32,8192,8192,512,512,b 1,32,32,8192,8192,512,512,d 1,32,32,8192,8192,512,512,g
  1,32,32,8192,8192,512,512,o 1,32,32,8192,8192,512,512,gr 1,32,32,8192,8192,512,512,cg})
# Variants (issue 24): a 1024-key window over N=32768 beside full attention at N=2048 (the window's
# share of the work), softcap and ALiBi beside plain, D=256 and 512.
VAR_PERF=(${VAR_PERF:-1,16,16,32768,32768,256,256,cw1024 1,16,16,2048,2048,256,256,c 1,16,16,32768,32768,512,512,cw1024
  1,16,16,2048,2048,512,512,c 1,32,32,8192,8192,256,256,s30 1,32,32,8192,8192,256,256 1,32,32,8192,8192,512,512,s30
  1,32,32,8192,8192,512,512 1,32,32,8192,8192,256,256,a 1,32,32,8192,8192,512,512,a})
# Deterministic backward (flag r) beside the same shapes without it.
DET_PERF=(${DET_PERF:-1,32,32,8192,8192,128,128,r 1,32,32,8192,8192,512,512,r 1,32,32,8192,8192,512,512,cr
  1,32,8,8192,8192,512,512,r 1,32,32,8192,8192,1024,1024,r})
KV_PERF=(${KV_PERF:-8,32,8,1,32768,128,128,64 8,32,8,1,32768,256,256,64 8,32,8,1,32768,512,512,64
  8,32,8,1,32768,1024,1024,64 8,32,8,4,32768,128,128,64,c 8,8,8,1,32768,128,128,64 8,32,8,1,32768,128,128,16
  8,32,8,1,32768,128,128,256 64,32,8,1,32768,128,128,64,x 128,16,1,1,8192,576,512,64,m
  64,128,1,1,8192,576,512,64,m 32,128,1,2,4096,576,512,64,mc 1,32,8,2048,8192,128,128,64,ca})
KV_DENSE=(8,32,8,1,32768,128,128 8,32,8,1,32768,512,512 8,128,1,1,8192,576,512)

want() { [[ " $STEPS " == *" $1 "* ]]; }

# ------------------------------------------------------------------ build
if want build || [ ! -x "$BENCH" ]; then
  if [ ! -f "$B/build.ninja" ]; then
    meson setup "$B" -Dcuda=enabled -Dcuda-archs="${ARCHS:-90a}" -Dhip=disabled >"$OUT/setup.log" 2>&1 ||
      { tail -20 "$OUT/setup.log"; exit 1; }
  fi
  # Meson records no header dependencies for .cu objects: after a header change (a warm machine's
  # second call), touch the CUDA sources so that ninja does not link stale kernels.
  stamp="$B/.ffpa-built"
  if [ -f "$stamp" ] && [ -n "$(find backends common api \( -name '*.cuh' -o -name '*.h' \) -newer "$stamp" -print -quit)" ]; then
    find backends/cuda -name '*.cu' -exec touch {} +
  fi
  t0=$(date +%s)
  ninja -C "$B" >"$OUT/build.log" 2>&1 || { grep -E "error" -A3 "$OUT/build.log" | head -40; exit 1; }
  touch "$stamp"
  note "build: $(( $(date +%s) - t0 )) s (archs ${ARCHS:-90a}, $(nproc) cores)"
fi
export FFPA_BACKEND_PATH="$PWD/$B/backends/cuda"

if want test; then
  for k in ${TEST_KERNELS:-auto generic}; do
    FFPA_CUDA_KERNEL=$k FFPA_TEST_BACKEND=cuda CMOCKA_MESSAGE_OUTPUT=TAP timeout 500 meson test -C "$B" \
      --suite oracle --suite validation --suite unit --print-errorlogs --num-processes 8 >"$OUT/test-$k.log" 2>&1
    note "test suite (cuda, FFPA_CUDA_KERNEL=$k): rc=$? passed/failed/skipped: $(python3 tools/count_tests.py "$B/meson-logs/testlog.json")"
    # The failing cmocka cases and their messages (meson's log keeps the TAP lines of each program).
    grep -E "^not ok|^(▶ .*FAIL)|^ERROR: " "$OUT/test-$k.log" "$B/meson-logs/testlog.txt" | head -10
  done
fi

if want check; then
  timeout 200 "$BENCH" --backend cuda --check --no-time "${FWD_CHECK[@]}" >"$OUT/check-fwd.log" 2>&1
  note "check forward (auto) vs cpu: rc=$? $(fails "$OUT/check-fwd.log" ${#FWD_CHECK[@]})"
  # sm90: every shape but the three it does not cover (D = 8, the two decode rows).
  FFPA_CUDA_KERNEL=sm90 timeout 200 "$BENCH" --backend cuda --check --no-time "${FWD_CHECK[@]:0:30}" \
    "${FWD_CHECK[@]:33}" >"$OUT/check-fwd-sm90.log" 2>&1
  note "check forward (sm90) vs cpu: rc=$? $(fails "$OUT/check-fwd-sm90.log" $(( ${#FWD_CHECK[@]} - 3 )))"
  # The variants' shapes on the generic kernels too (auto runs them on sm90).
  # Rows by their flags (window w, softcap s, ALiBi a), not by position: the lists grow.
  var_rows() { local r f; for r in "$@"; do IFS=, read -r _ _ _ _ _ _ _ f <<<"$r"; [[ $f == *[wsa]* ]] && echo "$r"; done; }
  mapfile -t fwd_var < <(var_rows "${FWD_CHECK[@]}")
  mapfile -t bwd_var < <(var_rows "${BWD_CHECK[@]}")
  FFPA_CUDA_KERNEL=generic timeout 200 "$BENCH" --backend cuda --check --no-time "${fwd_var[@]}" \
    >"$OUT/check-var-generic.log" 2>&1 &&
    FFPA_CUDA_KERNEL=generic timeout 200 "$BENCH" --backend cuda --backward --check --no-time "${bwd_var[@]}" \
      >>"$OUT/check-var-generic.log" 2>&1
  note "check variants (generic) vs cpu: rc=$? $(fails "$OUT/check-var-generic.log" $(( ${#fwd_var[@]} + ${#bwd_var[@]} )))"
  # The generic kernels' D <= 256 rows (two m-tiles per warp at D <= 128; plain and variant paths).
  small_rows=("${FWD_CHECK[@]:0:2}" "${FWD_CHECK[@]:3:1}" "${FWD_CHECK[@]:8:1}" "${FWD_CHECK[@]:10:1}" "${FWD_CHECK[@]:43}")
  FFPA_CUDA_KERNEL=generic timeout 200 "$BENCH" --backend cuda --check --no-time "${small_rows[@]}" \
    >"$OUT/check-fwd-generic.log" 2>&1
  note "check forward small-D (generic) vs cpu: rc=$? $(fails "$OUT/check-fwd-generic.log" ${#small_rows[@]})"
  # And its Split-D rows (D > 256: auto runs them on sm90), bf16 and f16.
  split_rows=()
  for r in "${FWD_CHECK[@]}"; do
    IFS=, read -r _ _ _ _ _ dqk dv _ <<<"$r"
    (( dqk > 256 || dv > 256 )) && split_rows+=("$r")
  done
  # Decode rows the KV-cache kernels do not take (bias, dropout, window): the split-KV path of the
  # key-split tiles (Dv 512: 512- and 256-column slabs).
  split_rows+=(1,4,2,2,1500,512,512,bdl 1,4,4,1,700,576,512,w50l)
  for dt in bf16 f16; do
    FFPA_CUDA_KERNEL=generic timeout 200 "$BENCH" --backend cuda --dtype $dt --check --no-time "${split_rows[@]}" \
      >"$OUT/check-fwd-generic-split-$dt.log" 2>&1
    note "check forward Split-D (generic, $dt) vs cpu: rc=$? $(fails "$OUT/check-fwd-generic-split-$dt.log" ${#split_rows[@]})"
  done
  # As on a 99 KiB part: 128-column slabs, Q streamed; dense decode above D = 512 leaves the KV-cache kernels.
  FFPA_CUDA_AS_ARCH=86 timeout 200 "$BENCH" --backend cuda --check --no-time "${split_rows[@]}" \
    >"$OUT/check-fwd-split-sm86.log" 2>&1
  note "check forward Split-D as sm_86 vs cpu: rc=$? $(fails "$OUT/check-fwd-split-sm86.log" ${#split_rows[@]})"
  timeout 300 "$BENCH" --backend cuda --backward --check --no-time "${BWD_CHECK[@]}" >"$OUT/check-bwd.log" 2>&1
  note "check backward (bf16) vs cpu: rc=$? $(fails "$OUT/check-bwd.log" ${#BWD_CHECK[@]})"
  timeout 120 "$BENCH" --backend cuda --dtype f16 --backward --check --no-time 1,2,2,90,150,320,320,c \
    1,2,1,70,150,1024,1024,c 2,4,2,130,200,128,128,vc 1,2,2,70,90,512,512,bd 1,2,2,70,90,512,512,go \
    1,2,1,90,130,1024,1024,cgr 2,2,2,100,100,256,256,c 1,2,2,70,100,800,800,cd >"$OUT/check-bwd-f16.log" 2>&1
  note "check backward (f16) vs cpu: rc=$? $(fails "$OUT/check-bwd-f16.log" 8)"
  # The generic backward on every shape (auto takes the sm90 one on an H100): dQ added by the dK/dV
  # kernels; then the split launch and the per-tile kernels (FFPA_BWD_DQ_ATOMIC=0 FFPA_BWD_RESIDENT=0)
  # and the small-shared-memory kernels (FFPA_BWD_SMEM_LIMIT=65536) on the first 24.
  FFPA_CUDA_KERNEL=generic timeout 300 "$BENCH" --backend cuda --backward --check --no-time "${BWD_CHECK[@]}" \
    >"$OUT/check-bwd-generic.log" 2>&1
  note "check backward (generic) vs cpu: rc=$? $(fails "$OUT/check-bwd-generic.log" ${#BWD_CHECK[@]})"
  FFPA_CUDA_KERNEL=generic FFPA_BWD_DQ_ATOMIC=0 FFPA_BWD_RESIDENT=0 timeout 200 "$BENCH" --backend cuda --backward \
    --check --no-time "${BWD_CHECK[@]:0:24}" >"$OUT/check-bwd-generic-split.log" 2>&1
  note "check backward (generic, split launch, per-tile) vs cpu: rc=$? $(fails "$OUT/check-bwd-generic-split.log" 24)"
  FFPA_CUDA_KERNEL=generic FFPA_BWD_SMEM_LIMIT=65536 timeout 200 "$BENCH" --backend cuda --backward --check \
    --no-time "${BWD_CHECK[@]:0:24}" >"$OUT/check-bwd-generic-small.log" 2>&1
  note "check backward (generic, 64 KiB) vs cpu: rc=$? $(fails "$OUT/check-bwd-generic-small.log" 24)"
  timeout 200 "$BENCH" --backend cuda --decode --check --reps 10 "${KV_CHECK[@]}" >"$OUT/check-kv.log" 2>&1
  note "check decode vs cpu: rc=$? $(fails "$OUT/check-kv.log" ${#KV_CHECK[@]})"
  grep -h FAIL "$OUT"/check-*.log | head -10
fi

if want sanitize; then
  for tool in memcheck racecheck synccheck; do
    for part in fwd bwd kv; do
      case $part in
        fwd) args=(--check "${FWD_SAN[@]}") ;;
        bwd) args=(--backward --check "${BWD_SAN[@]}") ;;
        kv) args=(--decode --reps 10 "${KV_SAN[@]}") ;;
      esac
      timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 "$BENCH" --backend cuda --no-time "${args[@]}" \
        >"$OUT/san-$tool-$part.log" 2>&1
      note "compute-sanitizer $tool $part: rc=$? $(san_summary "$OUT/san-$tool-$part.log")"
    done
  done
fi

if want bench; then
  for k in ${KERNELS:-auto generic}; do
    FFPA_CUDA_KERNEL=$k timeout 300 "$BENCH" --backend cuda --reps 10 --csv "$OUT/fwd-$k.csv" "${FWD_PERF[@]}" \
      >"$OUT/bench-fwd-$k.log" 2>&1
    note "bench forward $k: rc=$?"
    grep -v "^#" "$OUT/bench-fwd-$k.log" | head -20
  done
  timeout 400 "$BENCH" --backend cuda --backward --reps 10 --csv "$OUT/bwd.csv" "${BWD_PERF[@]}" \
    >"$OUT/bench-bwd.log" 2>&1
  note "bench backward: rc=$?"
  grep -v "^#" "$OUT/bench-bwd.log" | head -20
  timeout 300 "$BENCH" --backend cuda --backward --reps 10 --csv "$OUT/bwd-det.csv" "${DET_PERF[@]}" \
    >"$OUT/bench-bwd-det.log" 2>&1
  note "bench backward, deterministic: rc=$?"
  grep " bwd " "$OUT/bench-bwd-det.log"
  timeout 300 "$BENCH" --backend cuda --backward --reps 10 --csv "$OUT/bwd-opt.csv" "${OPT_PERF[@]}" \
    >"$OUT/bench-bwd-opt.log" 2>&1
  note "bench backward, options: rc=$?"
  grep " bwd " "$OUT/bench-bwd-opt.log"
  timeout 400 "$BENCH" --backend cuda --backward --reps 10 --csv "$OUT/var.csv" "${VAR_PERF[@]}" \
    >"$OUT/bench-var.log" 2>&1
  note "bench variants (window, softcap, ALiBi): rc=$?"
  grep -v "^#" "$OUT/bench-var.log"
  timeout 300 "$BENCH" --backend cuda --decode --reps 20 --csv "$OUT/kv.csv" "${KV_PERF[@]}" \
    >"$OUT/bench-kv.log" 2>&1
  note "bench decode: rc=$?"
  grep -v "^#" "$OUT/bench-kv.log" | head -20
  timeout 120 "$BENCH" --backend cuda --reps 20 --csv "$OUT/kv-dense.csv" "${KV_DENSE[@]}" >/dev/null 2>&1
fi

if want sdpa && python3 -c "import torch" 2>/dev/null; then
  python3 bench/py/sdpa_bench.py --gemm 8,128,1,1,8192,576,512 2>&1 | grep -E "gemm|device" | tee "$OUT/ceilings.log"
  for f in fwd-auto bwd kv-dense; do
    [ -f "$OUT/$f.csv" ] || continue
    extra=$([ $f = bwd ] && echo --backward)
    timeout 500 python3 bench/py/sdpa_bench.py $extra --merge "$OUT/$f.csv" --csv "$OUT/sdpa-$f.csv" \
      >"$OUT/sdpa-$f.log" 2>&1
    note "sdpa beside $f: rc=$?"
    tail -12 "$OUT/sdpa-$f.log"
  done
fi

if want fa2 && python3 -c "import torch" 2>/dev/null; then
  # Issue 25's peer: the same mma.sync instruction, the same run.
  FA2=(${FA2_SHAPES:-1,32,32,8192,8192,64,64 1,32,32,8192,8192,128,128 1,32,32,8192,8192,256,256
    1,32,32,8192,8192,128,128,c})
  FFPA_CUDA_KERNEL=generic timeout 400 "$BENCH" --backend cuda --backward --reps 10 --csv "$OUT/fa2-generic.csv" \
    "${FA2[@]}" >"$OUT/fa2-generic.log" 2>&1
  note "bench generic forward + backward: rc=$?"
  timeout 400 python3 bench/py/sdpa_bench.py --backward --sdpa-backend flash --gemm --merge "$OUT/fa2-generic.csv" \
    --csv "$OUT/fa2.csv" >"$OUT/fa2.log" 2>&1
  note "FlashAttention-2 (SDPA flash) beside the generic kernels: rc=$?"
  cat "$OUT/fa2.log"
fi

if want mla; then
  MLA=(64,128,1,1,8192,576,512,64,m 32,128,1,2,4096,576,512,64,mc 128,16,1,1,8192,576,512,64,m
       64,128,1,1,32768,576,512,64,mx 64,128,1,1,8192,576,512,16,m 64,128,1,1,8192,576,512,256,m
       128,16,1,1,8192,576,512,16,m 64,64,1,1,8192,576,512,64,m 64,32,1,4,8192,576,512,64,mc 8,128,1,1,8192,576,512,64,md)
  "$BENCH" --backend cuda --decode --reps 20 --csv "$OUT/mla.csv" "${MLA[@]}" 2>&1 | tee "$OUT/mla.log"
  "$BENCH" --backend cuda --decode --reps 20 --dtype f16 "${MLA[@]:0:1}" "${MLA[@]:2:1}" 2>&1 | tail -2 |
    sed 's/^/f16 /' | tee -a "$OUT/mla.log"
  FFPA_CUDA_KERNEL=generic "$BENCH" --backend cuda --decode --reps 10 "${MLA[@]:0:4}" 2>&1 | tail -4 |
    sed 's/^/generic /' | tee -a "$OUT/mla.log"
  for n in 1 3 4; do
    FFPA_KV_BLOCKS_PER_SM=$n "$BENCH" --backend cuda --decode --reps 20 8,32,8,1,32768,128,128,64 \
      8,32,8,1,32768,256,256,64 2>&1 | tail -2 | sed "s/^/blocks\/SM=$n /"
  done | tee "$OUT/kv-sweep.log"
fi

if want profile && command -v ncu >/dev/null; then
  M=sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
  M=$M,lts__t_bytes.sum.per_second,lts__t_sectors_op_red.sum,lts__t_sectors_op_read.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed
  # PROFILE_PASSES: fwd (the forward kernels, both families) and/or bwd (the backward's main kernel:
  # the Hopper one, or the generic dK/dV kernel). The clocks are left alone (--clock-control none).
  for pass in ${PROFILE_PASSES:-fwd}; do
    if [ "$pass" = fwd ]; then kernels="sm90 generic"; extra=(); shapes=${PROFILE_SHAPES:-1,32,32,4096,4096,256,256 1,32,32,4096,4096,512,512}
    else kernels=${PROFILE_BWD_KERNELS:-sm90}; extra=(--backward); shapes=${PROFILE_BWD_SHAPES:-1,32,32,4096,4096,128,128 1,32,32,4096,4096,512,512}; fi
    for k in $kernels; do
      case $pass-$k in fwd-*) regex=fwd_kernel ;; bwd-sm90) regex=sm90_bwd_kernel ;; *) regex=dkdv ;; esac
      for s in $shapes; do
        tag=$pass-$k-$(echo "$s" | cut -d, -f6-)
        FFPA_CUDA_KERNEL=$k timeout 300 ncu --clock-control none -k regex:"$regex" -c 1 --section SpeedOfLight \
          --section WarpStateStats --section MemoryWorkloadAnalysis --section Occupancy --section SchedulerStats \
          --section SourceCounters --section InstructionStats --import-source yes -o "$OUT/ncu-$tag" -f \
          --metrics "$M" "$BENCH" --backend cuda "${extra[@]}" --iters 1 --reps 1 --warmup 0 "$s" >"$OUT/ncu-$tag.log" 2>&1
        note "ncu $pass $k $s: rc=$?"
        ncu -i "$OUT/ncu-$tag.ncu-rep" --page details >"$OUT/ncu-$tag.txt" 2>&1
        if [ "${PROFILE_SOURCE:-0}" = 1 ]; then
          ncu -i "$OUT/ncu-$tag.ncu-rep" --page source --csv --print-source cuda,sass 2>/dev/null | gzip >"$OUT/ncu-src-$tag.csv.gz"
          python3 bench/py/ncu_source.py "$OUT/ncu-src-$tag.csv.gz" --top 30 >"$OUT/ncu-src-$tag.txt" 2>&1
          python3 bench/py/ncu_source.py "$OUT/ncu-src-$tag.csv.gz" --by stalls --top 30 >>"$OUT/ncu-src-$tag.txt" 2>&1
          head -8 "$OUT/ncu-src-$tag.txt"
        fi
        grep -E "cycles_active|lts__|Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Issue Slots Busy|Executed Instructions  |Stall" \
          "$OUT/ncu-$tag.txt" | head -24
      done
    done
  done
fi

if want tune; then
  mkdir -p "$B/ffpa/tuning"
  t0=$(date +%s)
  (cd "$B/ffpa/tuning" && ../../tuning/ffpa-tune --pass "${TUNE_PASS:-both}" --budget-s "${TUNE_BUDGET:-240}") \
    >"$OUT/tune.log" 2>&1
  note "ffpa-tune: rc=$? $(( $(date +%s) - t0 )) s; table(s): $(ls "$B/ffpa/tuning")"
  cp "$B"/ffpa/tuning/*.json "$OUT/" 2>/dev/null
  timeout 200 "$BENCH" --backend cuda --check --no-time "${FWD_CHECK[@]:0:12}" >"$OUT/check-tuned.log" 2>&1
  note "check forward with the new table: rc=$? $(fails "$OUT/check-tuned.log" 12)"
  timeout 300 "$BENCH" --backend cuda --backward --check --no-time "${BWD_CHECK[@]}" >"$OUT/check-tuned-bwd.log" 2>&1
  note "check backward with the new table: rc=$? $(fails "$OUT/check-tuned-bwd.log" ${#BWD_CHECK[@]})"
fi

if want tune-arch; then
  mkdir -p "$B/ffpa/tuning"
  for a in ${TUNE_ARCHS:-80 86}; do
    t0=$(date +%s)
    (cd "$B/ffpa/tuning" && FFPA_CUDA_AS_ARCH=$a ../../tuning/ffpa-tune --pass "${TUNE_PASS:-both}" \
      --budget-s "${TUNE_BUDGET:-140}") >"$OUT/tune-sm$a.log" 2>&1
    note "ffpa-tune as sm_$a: rc=$? $(( $(date +%s) - t0 )) s; $(tail -1 "$OUT/tune-sm$a.log")"
    cp "$B/ffpa/tuning/cuda-sm_$a.json" "$OUT/" 2>/dev/null
    FFPA_CUDA_AS_ARCH=$a timeout 200 "$BENCH" --backend cuda --check --no-time "${FWD_CHECK[@]}" \
      >"$OUT/check-tuned-sm$a.log" 2>&1
    note "check forward as sm_$a with its table: rc=$? $(fails "$OUT/check-tuned-sm$a.log" ${#FWD_CHECK[@]})"
    FFPA_CUDA_AS_ARCH=$a timeout 300 "$BENCH" --backend cuda --backward --check --no-time "${BWD_CHECK[@]}" \
      >"$OUT/check-tuned-bwd-sm$a.log" 2>&1
    note "check backward as sm_$a with its table: rc=$? $(fails "$OUT/check-tuned-bwd-sm$a.log" ${#BWD_CHECK[@]})"
  done
fi

if want grid; then
  R="$OUT/results/$(echo "$device" | tr ' ' '_')"
  mkdir -p "$R"
  G=()
  for d in 64 128 256 320 512 768 1024; do
    G+=("1,16,16,8192,8192,$d,$d" "1,16,16,8192,8192,$d,$d,c" "1,16,4,8192,8192,$d,$d" "1,32,8,1,8192,$d,$d")
  done
  for d in 128 512 1024; do G+=("1,16,16,2048,2048,$d,$d" "1,4,4,32768,32768,$d,$d" "1,32,32,4,4096,$d,$d"); done
  # Tuned and untuned back to back, in alternating order, shape by shape: clock
  # drift over a pass (a few percent) cannot pass for the table's effect.
  unset FFPA_CUDA_FWD_STAGES
  for i in "${!G[@]}"; do
    order=$( (( i % 2 )) && echo "untuned tuned" || echo "tuned untuned")
    for which in $order; do
      t=$([ $which = tuned ] && echo 1 || echo 0)
      FFPA_TUNING=$t "$BENCH" --backend cuda --reps "${REPS:-10}" --csv "$OUT/grid-$which-$i.csv" "${G[$i]}" >/dev/null 2>&1
    done
  done
  for which in tuned untuned; do
    head -1 "$OUT/grid-$which-0.csv" >"$R/ffpa_$which.csv"
    for i in "${!G[@]}"; do tail -n +2 "$OUT/grid-$which-$i.csv"; done >>"$R/ffpa_$which.csv"
  done
  rm -f "$OUT"/grid-*-*.csv
  python3 bench/py/sdpa_bench.py --merge "$R/ffpa_tuned.csv" --csv "$R/sdpa.csv" >/dev/null 2>&1
  python3 bench/py/plot_grid.py --tuned "$R/ffpa_tuned.csv" --untuned "$R/ffpa_untuned.csv" --sdpa "$R/sdpa.csv" \
    --out "$R" >"$R/grid.log" 2>&1
  note "grid: $(ls "$R" | tr '\n' ' ')"
fi

if want reliability; then
  FFPA_LIBRARY="$PWD/$B/libffpa.so" PYTHONPATH="$PWD/python" timeout 300 python3 bench/py/reliability_gpu.py \
    >"$OUT/reliability.log" 2>&1
  note "reliability_gpu.py (oom, > 2^31 elements): rc=$? $(grep -c '^ok' "$OUT/reliability.log") ok, $(grep -c '^FAIL' "$OUT/reliability.log") FAIL"
  grep -E "^(ok|FAIL|big)" "$OUT/reliability.log"
  for t in empty threads validation backend; do
    FFPA_TEST_BACKEND=cuda CMOCKA_MESSAGE_OUTPUT=TAP timeout 300 "$B/tests/test_$t" >"$OUT/rel-$t.log" 2>&1
    note "test_$t on cuda: rc=$? ok=$(grep -c '^ok' "$OUT/rel-$t.log") not_ok=$(grep -c '^not ok' "$OUT/rel-$t.log")"
  done
  seed=$(( $(date +%s) % 1000000 + 1000 ))
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
    note "stress $t: $n random cases from seed $seed: rc=$? cases=$(grep -c '^# case' "$OUT/stress-$t.log") not_ok=$(grep -c '^not ok' "$OUT/stress-$t.log"); device MiB $(awk 'NR == 1 {f = $1} {l = $1; if ($1 > m) m = $1} END {printf "first %s last %s max %s", f, l, m}' "$OUT/stress-$t-mem.txt")"
    grep -B2 -E "^ERROR" "$OUT/stress-$t.log" | head -6
  done
  for t in empty forward backward; do
    FFPA_TEST_BACKEND=cuda FFPA_TEST_RANDOM_CASES=${SAN_CASES:-40} FFPA_TEST_RANDOM_SEED=$seed CMOCKA_MESSAGE_OUTPUT=TAP \
      timeout 250 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/test_$t" >"$OUT/rel-san-$t.log" 2>&1
    note "memcheck test_$t (random sample): rc=$? $(san_summary "$OUT/rel-san-$t.log")"
  done
fi

if want python; then
  FFPA_LIBRARY="$PWD/$B/libffpa.so" PYTHONPATH="$PWD/python" timeout 500 python3 -m pytest -q -p no:cacheprovider \
    -rfE python/tests >"$OUT/pytest.log" 2>&1
  note "python tests on the GPU: rc=$? $(tail -1 "$OUT/pytest.log")"
  FFPA_LIBRARY="$PWD/$B/libffpa.so" PYTHONPATH="$PWD/python" timeout 500 python3 python/train_check.py --out "$OUT" \
    >"$OUT/train_check.log" 2>&1
  note "training check: rc=$? $(tail -1 "$OUT/train_check.log")"
fi

if want cp; then
  ngpu=$(nvidia-smi -L | wc -l)
  for w in ${CP_WORLDS:-1 2 4 8}; do
    [ "$w" -le "$ngpu" ] || break
    extra=$([ "$w" -gt 1 ] && echo "--check --ladder --variants ring,allgather" ||
            echo "--variants ${CP_SINGLE_VARIANTS:-none}")
    NCCL_DEBUG=${NCCL_DEBUG:-WARN} FFPA_LIBRARY="$PWD/$B/libffpa.so" PYTHONPATH="$PWD/python" timeout -s KILL "${CP_TIMEOUT:-580}" \
      torchrun --standalone --nproc_per_node="$w" bench/py/context_parallel.py $extra --shapes ${CP_SHAPES:-131072:8 524288:2} \
      --reps "${CP_REPS:-3}" >"$OUT/cp-$w.log" 2>&1
    note "context parallel on $w GPU(s): rc=$? $(grep -c ',ok$' "$OUT/cp-$w.log") checks ok, $(grep -c FAIL "$OUT/cp-$w.log") FAIL"
    grep "^bench\|^ceiling" "$OUT/cp-$w.log"
  done
fi

if want opencl; then
  # NVIDIA's OpenCL library is on the loader path but only pocl is registered with the ICD
  # loader: an .icd file naming the library, in a folder given by OCL_ICD_VENDORS, adds it.
  if ! ldconfig -p | grep -q 'libnvidia-opencl.so.1'; then
    note "opencl: libnvidia-opencl.so.1 not on this machine"
  elif [ ! -f "$B/backends/opencl/libffpa-opencl.so" ]; then
    note "opencl: plugin not built (ICD loader or headers missing: tools/device-deps.sh)"
  else
    icd=$(mktemp -d) && echo libnvidia-opencl.so.1 >"$icd/nvidia.icd"
    export OCL_ICD_VENDORS="$icd" FFPA_OPENCL_CACHE="$PWD/$B/opencl-cache-nvidia"
    FFPA_BACKEND=opencl "$B/tools/ffpa-run" --list >"$OUT/opencl-list.log" 2>&1
    note "opencl device: $(grep -i opencl "$OUT/opencl-list.log" | head -1)"
    if [ -z "${OCL_PERF_ONLY:-}" ]; then
      timeout -s KILL 420 meson test -C "$B" --num-processes 4 --no-rebuild ${OCL_TESTS:---suite opencl} \
        >"$OUT/opencl-tests.log" 2>&1
      note "opencl test suites: rc=$? $(grep -E '^(Ok|Fail|Timeout):' "$OUT/opencl-tests.log" | tr -s ' \n' ' ')"
      cp "$B/meson-logs/testlog.txt" "$OUT/opencl-testlog.txt" 2>/dev/null
      timeout 300 "$BENCH" --backend opencl --check --reps 1 "${FWD_CHECK[@]}" >"$OUT/check-fwd-opencl.log" 2>&1
      note "check forward (opencl) vs cpu: rc=$? $(fails "$OUT/check-fwd-opencl.log" ${#FWD_CHECK[@]})"
      timeout 400 "$BENCH" --backend opencl --backward --check --reps 1 "${BWD_CHECK[@]}" \
        >"$OUT/check-bwd-opencl.log" 2>&1
      note "check backward (opencl) vs cpu: rc=$? $(fails "$OUT/check-bwd-opencl.log" ${#BWD_CHECK[@]})"
    fi
    OCL_PERF=(${OCL_PERF:-1,32,32,8192,8192,512,512 1,32,32,8192,8192,128,128 1,32,32,8192,8192,256,256
      1,32,32,8192,8192,1024,1024 1,32,32,8192,8192,512,512,c})
    for k in ${OCL_KERNELS:-mma tiled portable}; do
      FFPA_OPENCL_FORWARD=$k timeout 300 "$BENCH" --backend opencl --reps 3 --csv "$OUT/fwd-opencl-$k.csv" \
        "${OCL_PERF[@]}" >"$OUT/bench-fwd-opencl-$k.log" 2>&1
      note "bench forward opencl $k: rc=$?"
      grep -v "^#" "$OUT/bench-fwd-opencl-$k.log"
    done
    # The matrix kernel's diagnostic builds (kernels/fwd_mma.cl FFPA_CL_DIAG: 1 no copies, 2 no MMAs,
    # 3 no per-element score; wrong results, timing only).
    for d in ${OCL_DIAG:-}; do
      FFPA_OPENCL_FORWARD=mma FFPA_OPENCL_BUILD_OPTIONS="-DFFPA_CL_DIAG=$d" timeout 300 "$BENCH" --backend opencl \
        --reps 3 "${OCL_PERF[@]}" >"$OUT/bench-fwd-opencl-diag$d.log" 2>&1
      note "bench forward opencl mma, FFPA_CL_DIAG=$d (timing only): rc=$?"
      grep -v "^#" "$OUT/bench-fwd-opencl-diag$d.log"
    done
    for k in generic auto; do
      FFPA_CUDA_KERNEL=$k timeout 200 "$BENCH" --backend cuda --reps 5 "${OCL_PERF[@]}" >"$OUT/bench-fwd-cuda-$k.log" 2>&1
      note "bench forward cuda $k (same shapes): rc=$?"
      grep -v "^#" "$OUT/bench-fwd-cuda-$k.log"
    done
    python3 - <<'PY' 2>&1 | tee "$OUT/sgemm.log"
import time, torch
torch.backends.cuda.matmul.allow_tf32 = False
a = torch.randn(8192, 8192, device="cuda"); b = torch.randn_like(a)
for _ in range(3): a @ b
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(10): a @ b
torch.cuda.synchronize()
print("ceiling: fp32 SGEMM (no TF32) 8192^3 %.1f TFLOP/s" % (10 * 2 * 8192 ** 3 / (time.perf_counter() - t) / 1e12))
PY
    unset OCL_ICD_VENDORS FFPA_OPENCL_CACHE
  fi
fi

if want opencl-sass; then
  if [ ! -x "$B/tools/cl-ptx-replay" ] || ! ldconfig -p | grep -q 'libnvidia-opencl.so.1'; then
    note "opencl-sass: needs tools/cl-ptx-replay (CUDA toolkit and OpenCL plugin) and NVIDIA's OpenCL"
  else
    icd=$(mktemp -d) && echo libnvidia-opencl.so.1 >"$icd/nvidia.icd"
    cache=$(mktemp -d)
    export OCL_ICD_VENDORS="$icd" FFPA_OPENCL_CACHE="$cache"
    SASS_SHAPES=(${SASS_SHAPES:-1,2,2,256,256,128,128 1,2,2,256,256,512,512})
    for k in mma tiled portable; do
      FFPA_OPENCL_FORWARD=$k timeout 300 "$BENCH" --backend opencl --reps 1 "${SASS_SHAPES[@]}" >/dev/null 2>&1
    done
    timeout 300 "$BENCH" --backend opencl --backward --reps 1 "${SASS_SHAPES[@]}" >/dev/null 2>&1
    timeout 600 python3 bench/py/jit_sass.py --replay "$B/tools/cl-ptx-replay" --cache "$cache" \
      >"$OUT/opencl-sass.txt" 2>&1
    note "opencl-sass: rc=$? $(tail -1 "$OUT/opencl-sass.txt")"
    grep -B2 FLAG "$OUT/opencl-sass.txt" | head -30
    unset OCL_ICD_VENDORS FFPA_OPENCL_CACHE
  fi
fi

if want hipnv; then
  t0=$(date +%s)
  bash backends/hip/nvidia-check.sh build build-hipnv >"$OUT/hipnv-build.log" 2>&1
  note "HIP on NVIDIA build: rc=$? $(( $(date +%s) - t0 )) s"
  OUT="$OUT/hipnv" HIPNV_STEPS="${HIPNV_STEPS:-forward backward validation kvcache}" \
    bash backends/hip/nvidia-check.sh test build-hipnv 2>&1 | grep "^==" | while read -r l; do note "hipnv $l"; done
fi

if want ab; then
  # Same-run baseline: a copy of this tree with AB_BASE's files laid over it (AB_BASE mirrors the
  # repository, e.g. filled with `git show REV:path` for the files a change touches), built fresh,
  # then both timed in alternation.
  [ -d "${AB_BASE:-}" ] || { echo "ab: AB_BASE=${AB_BASE:-} is not a folder"; exit 2; }
  BB=${AB_DIR:-/tmp/ffpa-ab-base}
  rm -rf "$BB" && mkdir -p "$BB"
  tar --exclude="./$B" --exclude=./.git -cf - . | tar -xf - -C "$BB" && cp -r "$AB_BASE"/. "$BB"/
  (cd "$BB" && OUT="$OUT/ab-base" bash bench/gpu.sh build >/dev/null 2>&1)
  [ -x "$BB/$B/bench/ffpa-bench" ] || { echo "ab: the base did not build (see $OUT/ab-base/build.log)"; exit 1; }
  note "ab: base built from $AB_BASE ($(cd "$AB_BASE" && find . -type f | wc -l) files laid over this tree)"
  for round in $(seq "${AB_ROUNDS:-2}"); do
    for side in new base; do
      R=$PWD/$B; [ $side = base ] && R=$BB/$B
      FFPA_BACKEND_PATH=$R/backends/cuda timeout 400 "$R/bench/ffpa-bench" --backend cuda ${AB_FLAGS:---backward} \
        --reps 5 ${AB_SHAPES:-${BWD_PERF[*]}} 2>&1 | grep -vE "^(#|shape |device)" | sed "s/^/$side$round /" |
        tee -a "$OUT/ab.txt"
    done
  done
fi

if want diag; then
  case ${DIAG:-1} in
    2) flag=-DFFPA_SM90_DIAG_TIMELINE ;;
    3) flag=-DFFPA_SM90_BWD_DIAG_SKIP_DQ ;;
    *) flag=-DFFPA_SM90_DIAG_SKIP_EXCHANGE ;;
  esac
  D="$B-diag${DIAG:-1}"
  [ -f "$D/build.ninja" ] || meson setup "$D" -Dcuda=enabled -Dcuda-archs=90a -Dhip=disabled -Dcuda_args=$flag \
    >"$OUT/setup-diag.log" 2>&1
  ninja -C "$D" backends/cuda/libffpa-cuda.so bench/ffpa-bench >"$OUT/build-diag.log" 2>&1
  reps=$([ "${DIAG:-1}" = 2 ] && echo "--reps 1 --iters 1 --warmup 0" || echo "--reps 10")
  [ "${DIAG:-1}" = 3 ] && reps="$reps --backward"
  FFPA_BACKEND_PATH="$PWD/$D/backends/cuda" FFPA_CUDA_KERNEL=sm90 timeout 120 "$D/bench/ffpa-bench" --backend cuda \
    $reps ${DIAG_SHAPES:-1,32,32,8192,8192,256,256 1,32,32,8192,8192,512,512 1,32,32,8192,8192,1024,1024} \
    >"$OUT/bench-diag.log" 2>&1
  note "diag ${DIAG:-1} ($flag): rc=$?"
  grep -v "^#" "$OUT/bench-diag.log"
fi

echo
echo "================ summary ($device; steps: $STEPS)"
printf '%s\n' "${summary[@]}"
