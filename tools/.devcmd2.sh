. tools/device-env.sh
R=$OUT/r; mkdir -p $R
bash bench/gpu.sh build > $R/build.log 2>&1; tail -1 $R/build.log
B=build-gpu; BENCH=$B/bench/ffpa-bench
icd=$(mktemp -d) && echo libnvidia-opencl.so.1 >"$icd/nvidia.icd"
export OCL_ICD_VENDORS="$icd" FFPA_OPENCL_CACHE="$PWD/$B/opencl-cache-nvidia"
FFPA_BACKEND=opencl $B/tools/ffpa-run --list > $R/list.log 2>&1; grep -i opencl $R/list.log | head -2
timeout -s KILL 300 meson test -C $B --num-processes 4 --no-rebuild forward-opencl kvcache-opencl forward-opencl-tiled kvcache-opencl-tiled > $R/ocl-tests.log 2>&1
echo "ocl tests rc=$? $(grep -E '^(Ok|Fail|Timeout):' $R/ocl-tests.log | tr -s ' \n' ' ')"
cp $B/meson-logs/testlog.txt $R/ocl-testlog.txt
KVC=(8,32,8,1,3000,128,128,64 4,32,8,5,700,128,128,16,c 3,16,1,1,2000,576,512,64,m 2,64,1,2,900,576,512,64,mc 5,12,4,3,333,72,72,16,ca 2,8,1,1,129,512,512,64)
for pk in 1 0; do $( [ $pk = auto ] && echo env -u FFPA_OPENCL_PACKED_HEADS || echo env FFPA_OPENCL_PACKED_HEADS=$pk) timeout 200 $BENCH --backend opencl --decode --check --no-time "${KVC[@]}" > $R/kvcheck-ocl-pk$pk.log 2>&1; echo "kv check opencl pack=$pk rc=$? $(grep -c ' ok ' $R/kvcheck-ocl-pk$pk.log) ok $(grep -c FAIL $R/kvcheck-ocl-pk$pk.log) FAIL"; done
KVP=(8,32,8,1,8192,128,128,64 8,32,8,4,8192,128,128,64,c 8,32,4,1,8192,256,256,64 16,128,1,1,4096,576,512,64,m 8,16,1,1,8192,576,512,64,m)
for pk in auto 1 0; do $( [ $pk = auto ] && echo env -u FFPA_OPENCL_PACKED_HEADS || echo env FFPA_OPENCL_PACKED_HEADS=$pk) timeout 200 $BENCH --backend opencl --decode --reps 10 "${KVP[@]}" > $R/kv-ocl-pk$pk.log 2>&1; echo "== opencl decode pack=$pk rc=$?"; grep -v "^#" $R/kv-ocl-pk$pk.log; done
FP=(4,32,8,1,8192,128,128 2,16,1,1,8192,576,512)
for pk in auto 1 0; do $( [ $pk = auto ] && echo env -u FFPA_OPENCL_PACKED_HEADS || echo env FFPA_OPENCL_PACKED_HEADS=$pk) timeout 100 $BENCH --backend opencl --reps 10 "${FP[@]}" > $R/fwd-ocl-pk$pk.log 2>&1; echo "== opencl dense decode pack=$pk rc=$?"; grep -v "^#" $R/fwd-ocl-pk$pk.log; done
unset OCL_ICD_VENDORS FFPA_OPENCL_CACHE
timeout 100 $BENCH --backend cuda --decode --reps 10 "${KVP[@]}" > $R/kv-cuda.log 2>&1; echo "== cuda decode rc=$?"; grep -v "^#" $R/kv-cuda.log
cd $OUT && tar czf r.tgz r
