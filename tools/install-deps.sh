#!/usr/bin/env bash
# Installs what libffpa needs from Debian's packages. Usage:
#   tools/install-deps.sh          build + run (compiler, meson, ninja)
#   tools/install-deps.sh --test   also what the test suite needs
set -euo pipefail
packages=(gcc pkg-config meson ninja-build libcjson-dev)
if [ "${1:-}" = "--test" ]; then
  # clang-19 + lld-19 compile the HIP plugin for gfx90a/gfx942/gfx1100 (see docs/notes/hip.md);
  # clang-tools-19 has clang-offload-bundler, which clang++ runs for every HIP object (only a Recommends)
  # libclang-rt-19-dev: libFuzzer and the sanitizer runtimes for clang (tools/fuzz.sh);
  # python3-venv, python3-mesonpy, patchelf: `pip install ./python` builds libffpa into the wheel
  # ocl-icd-opencl-dev, opencl-c-headers: the OpenCL plugin; pocl-opencl-icd: a CPU OpenCL device to test it on
  packages+=(libcmocka-dev python3 python3-pytest python3-torch python3-numpy clang-19 lld-19 clang-tools-19
             libamdhip64-dev libclang-rt-19-dev cmake doxygen python3-venv python3-mesonpy patchelf
             ocl-icd-opencl-dev opencl-c-headers pocl-opencl-icd)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
