#!/usr/bin/env bash
# Prepares .deps/: Debian's cmocka, cJSON and the OpenCL ICD loader + headers unpacked into a folder that the
# device tool carries to the GPU machine (which has no apt and no network).
# On that machine: `. tools/device-env.sh` before meson setup.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .deps && mkdir -p .deps/debs .deps/root
(cd .deps/debs && apt-get download libcmocka0 libcmocka-dev libcjson1 libcjson-dev \
  ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers >/dev/null)
for deb in .deps/debs/*.deb; do dpkg -x "$deb" .deps/root; done
# Make the .pc files relocatable.
for pc in .deps/root/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc; do
  sed -i -e 's|^prefix=.*|prefix=${pcfiledir}/../../..|' \
         -e 's|^libdir=/usr/|libdir=${pcfiledir}/../../../|' \
         -e 's|^includedir=/usr/|includedir=${pcfiledir}/../../../|' \
         -e 's|-I/usr/include|-I${pcfiledir}/../../../include|' \
         -e 's|-L/usr/lib/x86_64-linux-gnu|-L${pcfiledir}/..|' "$pc"
done
rm -rf .deps/debs
du -sh .deps
