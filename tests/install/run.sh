#!/usr/bin/env bash
# Installs libffpa from a build dir into a temporary prefix, builds
# consumer.c against it with pkg-config alone, runs it, then builds it again
# as a CMake project (find_package(ffpa CONFIG REQUIRED) -> ffpa::ffpa) and
# runs that.
# Usage: tests/install/run.sh BUILD_DIR
set -euo pipefail
build="$1"
here="$(cd "$(dirname "$0")" && pwd)"
prefix="$(mktemp -d)"
trap 'rm -rf "$prefix"' EXIT
meson install -C "$build" --destdir "$prefix" >/dev/null
root="$prefix$(meson introspect "$build" --buildoptions | python3 -c 'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"][0])')"
pc_dir="$(dirname "$(find "$root" -name ffpa.pc | head -n 1)")"
export PKG_CONFIG_PATH="$pc_dir" PKG_CONFIG_SYSROOT_DIR="$prefix"
# The .pc file names the configured prefix; the sysroot points it at the staged copy.
libdir="$(dirname "$pc_dir")"
cc -std=c11 -O2 -Wall -Wextra "$here/consumer.c" $(pkg-config --cflags ffpa) $(pkg-config --libs ffpa) -lm \
  -Wl,-rpath,"$libdir" -o "$prefix/consumer"
"$prefix/consumer"
echo "pkg-config consumer: ok"
if command -v cmake >/dev/null; then
  cmake -S "$here/cmake" -B "$prefix/cmake-build" -DCMAKE_PREFIX_PATH="$root" -DCMAKE_BUILD_TYPE=Release \
    >"$prefix/cmake.log" 2>&1 || { cat "$prefix/cmake.log"; exit 1; }
  cmake --build "$prefix/cmake-build" >>"$prefix/cmake.log" 2>&1 || { cat "$prefix/cmake.log"; exit 1; }
  "$prefix/cmake-build/consumer"
  echo "CMake consumer: ok"
else
  echo "CMake consumer: cmake not installed" >&2
  exit 1
fi
