#!/bin/sh
# meson test sm90-sass: the CUDA plugin's sm_90a code holds the Hopper
# instructions the sm90 forward is built on - HGMMA (wgmma) and UTMALDG (TMA
# loads) - rather than only HMMA. Needs cuobjdump (beside nvcc); no GPU.
set -eu
so="$1"
cuobjdump=${CUOBJDUMP:-$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")/cuobjdump}
if [ ! -x "$cuobjdump" ]; then
  echo "SKIP: no cuobjdump beside nvcc (the GPU machine has it: bench/gpu.sh test runs this test)"
  exit 77
fi
sass=$("$cuobjdump" -sass -arch sm_90a "$so")
hgmma=$(printf '%s\n' "$sass" | grep -c HGMMA || true)
utmaldg=$(printf '%s\n' "$sass" | grep -c UTMALDG || true)
echo "sm_90a SASS of $so: $hgmma HGMMA, $utmaldg UTMALDG"
[ "$hgmma" -gt 0 ] && [ "$utmaldg" -gt 0 ]
