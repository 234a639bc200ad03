#!/usr/bin/env bash
# README command 1: installs what is needed, builds libffpa and runs the main
# job (ffpa-run) on the default backend: the GPU where one is usable, else cpu.
# Extra arguments go to ffpa-run (see ffpa-run --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
. tools/env.sh
# Build the GPU plugins only where a GPU of that kind is here to run them
# (the test command builds them all, GPU or not, to check they compile).
gpu_opts=(-Dcuda=disabled -Dhip=disabled)
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d '.')
  [ "$cap" = 90 ] && cap=90a
  gpu_opts=(-Dcuda=auto -Dcuda-archs="$cap" -Dhip=disabled)
elif [ -e /dev/kfd ]; then
  gpu_opts=(-Dcuda=disabled -Dhip=auto)
fi
[ -f build/build.ninja ] || meson setup build -Dtests=false "${gpu_opts[@]}"
ninja -C build
./build/tools/ffpa-run --list
./build/tools/ffpa-run "$@"
