#!/usr/bin/env bash
# The opencl backend's process-wide choices fail clearly (one process each,
# as the device is chosen once per process): no OpenCL platform, a device
# index or name that does not exist, too little local memory for any tiles,
# a forward kernel override that is unknown or does not fit, a matrix-forward geometry it does not have,
# a split count or packed-heads switch it does not take.
# Usage: opencl_errors.sh FFPA_RUN
set -u
run=$1
fails=0
dtype=bf16
expect() { # expect NEEDLE ENV... : ffpa-run --backend opencl exits 2 with NEEDLE on stderr
  local needle=$1
  shift
  local err rc
  err=$(env "$@" "$run" --backend opencl --nq 8 -d 16 --dtype "$dtype" --no-backward 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" != 2 ] || [[ "$err" != *"$needle"* ]]; then
    echo "not ok: $* -> status $rc (want 2), stderr: ${err:0:300} (want '$needle')"
    fails=$((fails + 1))
  else
    echo "ok: $*"
  fi
}
empty=$(mktemp -d)
expect "no OpenCL platform" OCL_ICD_VENDORS="$empty" OCL_ICD_FILENAMES=
rmdir "$empty"
expect "FFPA_OPENCL_DEVICE=99: no such device; expected one of:" FFPA_OPENCL_DEVICE=99
expect "FFPA_OPENCL_DEVICE=7:3: no such device" FFPA_OPENCL_DEVICE=7:3
expect "FFPA_OPENCL_DEVICE=no-such-accelerator: no such device" FFPA_OPENCL_DEVICE=no-such-accelerator
# Less local memory than the smallest tiles (common/plan.c) need: refused by the forward, with the needs.
expect "offers 500 bytes of local memory" FFPA_OPENCL_LOCAL_MEM=500
expect "the smallest tiles need 960 bytes and 32" FFPA_OPENCL_LOCAL_MEM=959
# The forward kernel's override: a value it does not know; the tiled kernel where it does not fit (8 query
# rows: its 16-row tiles, common/plan.c).
expect "FFPA_OPENCL_FORWARD=bogus: expected mma, tiled or portable" FFPA_OPENCL_FORWARD=bogus
expect "FFPA_OPENCL_FORWARD=tiled: the tiled forward needs 22528 bytes" FFPA_OPENCL_FORWARD=tiled FFPA_OPENCL_LOCAL_MEM=20000
# The matrix forward where it cannot run: pocl's CPU device has no mma.sync; an NVIDIA device refuses
# f32 (16-bit inputs only).
dtype=f32
expect "FFPA_OPENCL_FORWARD=mma: the matrix forward cannot run this call on" FFPA_OPENCL_FORWARD=mma
# Its warp-count knob, refused before anything runs when it is not a geometry the kernel has.
for tiles in 3x2 4x8 4 4x2x1 0x0; do
  expect "FFPA_OPENCL_MMA_TILES=$tiles: expected WMxWN warps" FFPA_OPENCL_FORWARD=mma FFPA_OPENCL_MMA_TILES=$tiles
done
# The other forward knobs, refused in the same way (a typo would otherwise time the default).
for splits in 0 17 x 2x; do
  expect "FFPA_OPENCL_KV_SPLITS=$splits: expected a split count, 1 to 16" FFPA_OPENCL_KV_SPLITS=$splits
done
for packed in 2 yes; do
  expect "FFPA_OPENCL_PACKED_HEADS=$packed: expected 0 or 1" FFPA_OPENCL_PACKED_HEADS=$packed
done
for emulate in 2 on; do
  expect "FFPA_OPENCL_MMA_EMULATE=$emulate: expected 0 or 1" FFPA_OPENCL_MMA_EMULATE=$emulate
done
echo "$fails failure(s)"
[ "$fails" -eq 0 ]
