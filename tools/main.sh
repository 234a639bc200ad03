#!/usr/bin/env bash
# README command 1: installs what is needed, builds libffpa and runs the main
# job (ffpa-run) on the default backend: the GPU where one is usable, else cpu.
# Extra arguments go to ffpa-run (see ffpa-run --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
. tools/env.sh
[ -f build/build.ninja ] || meson setup build -Dtests=false
ninja -C build
./build/tools/ffpa-run --list
./build/tools/ffpa-run "$@"
