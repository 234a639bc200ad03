#!/usr/bin/env bash
# Installs libffpa from a build dir into a temporary prefix, builds
# consumer.c against it with pkg-config alone, and runs it.
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
