. tools/device-env.sh
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $R/gpu.txt
bash bench/gpu.sh build > $R/build.log 2>&1; tail -2 $R/build.log
T=build-gpu/tuning/ffpa-tune
SH="--shape 1,32,32,8192,8192,320 --shape 1,32,32,8192,8192,384 --shape 1,32,32,8192,8192,448 --shape 1,32,32,8192,8192,512 --shape 1,32,32,8192,8192,768 --shape 1,16,16,8192,8192,1024 --shape 1,32,32,8192,8192,320,c --shape 1,32,32,8192,8192,512,c"
FFPA_TUNING=0 FFPA_CUDA_KERNEL=generic timeout 280 $T --backend cuda --pass fwd --reps 10 --budget-s 240 --out $R/tune-generic.json $SH > $R/tune-generic.log 2>&1; echo "tune generic rc=$?"
SH2="--shape 1,32,32,8192,8192,320 --shape 1,32,32,8192,8192,320,c --shape 4,16,16,2048,2048,320 --shape 1,32,32,8192,8192,384"
FFPA_TUNING=0 timeout 200 $T --backend cuda --pass fwd --reps 10 --budget-s 150 --out $R/tune-auto.json $SH2 > $R/tune-auto.log 2>&1; echo "tune auto rc=$?"
tail -3 $R/tune-generic.log $R/tune-auto.log
cd $OUT && tar czf r.tgz r
