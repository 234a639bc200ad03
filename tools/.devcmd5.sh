. tools/device-env.sh
R=$OUT/r; mkdir -p $R
bash bench/gpu.sh build > $R/build.log 2>&1; tail -1 $R/build.log
B=build-gpu; BENCH=$B/bench/ffpa-bench
icd=$(mktemp -d) && echo libnvidia-opencl.so.1 >"$icd/nvidia.icd"
export OCL_ICD_VENDORS="$icd" FFPA_OPENCL_CACHE="$PWD/$B/opencl-cache-nvidia"
timeout -s KILL 300 meson test -C $B --num-processes 4 --no-rebuild forward-opencl kvcache-opencl kvcache-opencl-tiled kvcache-opencl-kv-splits merge-opencl > $R/ocl-tests.log 2>&1
echo "ocl tests rc=$? $(grep -E '^(Ok|Fail|Timeout):' $R/ocl-tests.log | tr -s ' \n' ' ')"
KVC=(8,32,8,1,3000,128,128,64 4,32,8,5,700,128,128,16,c 3,16,1,1,2000,576,512,64,m 2,64,1,2,900,576,512,64,mc 5,12,4,3,333,72,72,16,ca 2,8,1,1,129,512,512,64 16,128,1,1,700,576,512,64,m 3,8,2,1,5000,256,256,64,x)
timeout 200 $BENCH --backend opencl --decode --check --no-time "${KVC[@]}" > $R/kvcheck-planned.log 2>&1; echo "kv check planned rc=$? $(grep -c ': pass' $R/kvcheck-planned.log) pass $(grep -ci 'fail' $R/kvcheck-planned.log) fail"
KVP=(8,32,8,1,8192,128,128,64 8,32,8,4,8192,128,128,64,c 8,32,4,1,8192,256,256,64 16,128,1,1,4096,576,512,64,m 64,128,1,1,4096,576,512,64,m 8,16,1,1,8192,576,512,64,m 64,16,1,1,4096,576,512,64,m 1,32,8,1,32768,128,128,64 32,32,16,1,4096,128,128,64)
run() { env $2 timeout 200 $BENCH --backend opencl --decode --reps 10 "${KVP[@]}" > $R/kv-ocl-$1.log 2>&1; echo "== opencl decode $1 ($2) rc=$?"; grep -v "^#" $R/kv-ocl-$1.log | awk '{print $1, $(NF-3), $(NF-2)}'; }
run planned X=1; run packed FFPA_OPENCL_PACKED_HEADS=1; run unpacked FFPA_OPENCL_PACKED_HEADS=0; run nosplit FFPA_OPENCL_KV_SPLITS=1
unset OCL_ICD_VENDORS FFPA_OPENCL_CACHE
timeout 100 $BENCH --backend cuda --decode --reps 10 "${KVP[@]}" > $R/kv-cuda.log 2>&1; echo "== cuda decode rc=$?"; grep -v "^#" $R/kv-cuda.log | awk '{print $1, $2, $3, $(NF-3), $(NF-2)}'
cd $OUT && tar czf r.tgz r
