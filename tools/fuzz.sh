#!/usr/bin/env bash
# Builds the libFuzzer target fuzz/fuzz_api (clang-19, AddressSanitizer +
# UBSan, coverage of the whole core and cpu backend) and runs it on the seed
# corpus (fuzz/seeds.txt) for SECONDS (default 60). Prints libFuzzer's
# final figures (executions, coverage); a finding is saved as
# BUILD/fuzz-crash-* and fails the script. New corpus entries stay in
# BUILD/fuzz-corpus for the next run.
#   bash tools/fuzz.sh [SECONDS]      (FUZZ_BUILD=dir, FUZZ_FORKS=N parallel workers)
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
B=${FUZZ_BUILD:-build-fuzz}
if [ ! -f "$B/build.ninja" ]; then
  CC=clang-19 meson setup "$B" -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false \
    -Dbuildtype=debugoptimized -Dopenmp=disabled -Dcuda=disabled -Dhip=disabled -Dtests=false \
    >"${TMPDIR:-/tmp}/ffpa-fuzz-setup.log" 2>&1 || { tail -20 "${TMPDIR:-/tmp}/ffpa-fuzz-setup.log"; exit 1; }
fi
ninja -C "$B" fuzz/fuzz_api >/dev/null || { ninja -C "$B" fuzz/fuzz_api | tail -20; exit 1; }
mkdir -p "$B/fuzz-corpus"
python3 - "$B/fuzz-corpus" <<'PY'
import hashlib, os, sys
for line in open("fuzz/seeds.txt"):
    line = line.strip()
    if line and not line.startswith("#"):
        data = bytes.fromhex(line)
        with open(os.path.join(sys.argv[1], hashlib.sha1(data).hexdigest()), "wb") as f:
            f.write(data)
PY
forks=()
[ -n "${FUZZ_FORKS:-}" ] && forks=(-fork="$FUZZ_FORKS" -ignore_crashes=0)
ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  "$B/fuzz/fuzz_api" -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$B/fuzz-crash-" \
  "${forks[@]}" "$B/fuzz-corpus" >"$B/fuzz.log" 2>&1
rc=$?
grep -E "INITED|DONE|ERROR|SUMMARY|runtime error|Test unit written" "$B/fuzz.log" | tail -8
grep -E "^#[0-9]+: cov:" "$B/fuzz.log" | tail -1 # fork mode: executions and coverage so far
grep -E "stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)" "$B/fuzz.log"
exit $rc
