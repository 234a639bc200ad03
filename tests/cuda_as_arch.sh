#!/usr/bin/env bash
# FFPA_CUDA_AS_ARCH (the cuda backend playing an sm_80/86/89 part): a value
# it does not know, or a part above the device, stops the backend with a
# message naming the variable; a known part runs, named in the device name.
# Needs a CUDA device (skipped otherwise). Usage: cuda_as_arch.sh FFPA_RUN
set -u
run=$1
if ! "$run" --list 2>/dev/null | grep -qE '^cuda +[0-9.]+ +available'; then
  echo "SKIP: no cuda backend here"
  exit 77
fi
fails=0
expect() { # expect NEEDLE VALUE: ffpa-run --backend cuda exits non-zero with NEEDLE on stderr
  local err rc
  err=$(FFPA_CUDA_AS_ARCH="$2" "$run" --backend cuda --nq 8 -d 16 --no-backward 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" = 0 ] || [[ "$err" != *"$1"* ]]; then
    echo "not ok: FFPA_CUDA_AS_ARCH=$2 -> status $rc, stderr: ${err:0:300} (want '$1')"
    fails=$((fails + 1))
  else
    echo "ok: FFPA_CUDA_AS_ARCH=$2 refused"
  fi
}
for v in 75 90 abc 86x ""; do
  [ -z "$v" ] && continue
  expect "FFPA_CUDA_AS_ARCH='$v': expected 80, 86 or 89" "$v"
done
# A part the device can play: it runs, and says what it plays.
arch=$("$run" --list 2>/dev/null | sed -n 's/^cuda .*(sm_\([0-9]*\),.*/\1/p')
if [ "${arch:-0}" -ge 86 ]; then
  out=$(FFPA_CUDA_AS_ARCH=86 "$run" --backend cuda --nq 70 -d 128 2>&1)
  if [ $? != 0 ] || [[ "$out" != *"as sm_86"* ]]; then
    echo "not ok: FFPA_CUDA_AS_ARCH=86 did not run as sm_86: ${out:0:300}"
    fails=$((fails + 1))
  else
    echo "ok: FFPA_CUDA_AS_ARCH=86 runs as sm_86"
  fi
fi
echo "$fails failure(s)"
[ "$fails" -eq 0 ]
