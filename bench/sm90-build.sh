# Sourced by the Hopper GPU-machine scripts (sm90-check.sh, sm90-bwd-check.sh)
# with OUT and B set: the .deps environment, note() for the closing summary,
# and the sm_90a build of B (exits on failure). Sets BENCH and FFPA_BACKEND_PATH.
[ -d .deps ] && . tools/device-env.sh
summary=()
note() { summary+=("$1"); echo "== $1"; }

if [ ! -f "$B/build.ninja" ]; then
  meson setup "$B" -Dcuda=enabled -Dcuda-archs="${ARCHS:-90a}" -Dhip=disabled >"$OUT/setup.log" 2>&1 ||
    { tail -20 "$OUT/setup.log"; exit 1; }
fi
t0=$(date +%s)
ninja -C "$B" >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
note "build: $(( $(date +%s) - t0 )) s"
BENCH="$B/bench/ffpa-bench"
export FFPA_BACKEND_PATH="$PWD/$B/backends/cuda"
