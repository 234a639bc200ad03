#!/usr/bin/env bash
# README command 2: installs what is needed, builds libffpa with its tests
# and runs them (C suite; the same suite under AddressSanitizer and UBSan
# with host allocation failures injected; the thread test under
# ThreadSanitizer; 60 s of fuzzing; the Python package's tests, in tree and
# installed with pip into a fresh virtual environment). Ends with
# "N passed, N failed, N skipped".
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh --test || exit 1
. tools/env.sh
jobs=$(nproc)
export CMOCKA_MESSAGE_OUTPUT=TAP

passed=0 failed=0 skipped=0
# Each stage's heading carries the seconds since the start (CI's time budget:
# the breakdown shows where the build and test time goes).
stage() { echo "== $* [at ${SECONDS} s]"; }
# Adds meson's counts from a build's testlog.json (each cmocka case counts once).
count_meson() {
  local log="$1/meson-logs/testlog.json"
  [ -f "$log" ] || { failed=$((failed + 1)); return; }
  read -r p f s < <(python3 tools/count_tests.py "$log")
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
}

stage "build (release, with every backend this machine can build)"
# GPU targets: one per distinct code path, not every supported part (the
# device code is compiled, not run, here; it is most of the build time):
# gfx942 covers gfx90a's (both take arch_cdna.h's MFMA path); sm_80 covers
# sm_86 (the same mma.sync kernels, 163 KiB blocks); 90a has the WGMMA/TMA
# kernels and the generic ones at 227 KiB, which is all sm_100a compiles;
# 120a the generic kernels at 99 KiB, as sm_89. 80 and 120a as PTX only:
# every code path still goes through the compiler's front end and NVVM,
# ptxas runs for 90a (whose SASS the sm90-sass test reads on the GPU
# machine); that halves their share of the build (the generic backward's
# 120a pass: 90 s -> 41 s). Release builds keep meson_options' full lists.
if [ ! -f build-test/build.ninja ]; then
  meson setup build-test -Dhip-archs=gfx942,gfx1100 -Dcuda-archs=90a -Dcuda-ptx-archs=80,120a || exit 1
fi
ninja -C build-test -j "$jobs" || exit 1
stage "tests"
meson test -C build-test --print-errorlogs --num-processes "$jobs"
count_meson build-test

stage "install check: a program outside the project, built against the installed library with pkg-config and with CMake"
if bash tests/install/run.sh build-test; then passed=$((passed + 1)); else failed=$((failed + 1)); fi

stage "tests under -Db_sanitize=address,undefined (cpu backend), host allocation failures injected"
if [ ! -f build-asan/build.ninja ]; then
  meson setup build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debugoptimized \
    -Dcuda=disabled -Dhip=disabled -Dopencl=disabled -Dalloc-failure-injection=true || exit 1
fi
ninja -C build-asan -j "$jobs" || exit 1
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  meson test -C build-asan --print-errorlogs --num-processes "$jobs" --suite unit --suite validation \
    --suite oracle --suite alloc
count_meson build-asan

stage "thread-safety test under ThreadSanitizer (cpu backend)"
if [ ! -f build-tsan/build.ninja ]; then
  meson setup build-tsan -Db_sanitize=thread -Db_lundef=false -Dbuildtype=debugoptimized \
    -Dcuda=disabled -Dhip=disabled -Dopencl=disabled -Dopenmp=disabled || exit 1
fi
ninja -C build-tsan -j "$jobs" tests/test_threads || exit 1
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  meson test -C build-tsan --no-rebuild --print-errorlogs threads
count_meson build-tsan

stage "fuzzing the C API for 60 s (libFuzzer, ASan + UBSan, cpu backend; longer: bash tools/fuzz.sh SECONDS)"
if bash tools/fuzz.sh 60; then passed=$((passed + 1)); else failed=$((failed + 1)); fi

# Adds a pytest run's counts (its last line) to the totals; prints its output.
count_pytest() {
  local out="$1" rc="$2" line p f s
  echo "$out"
  line=$(echo "$out" | tail -n 1)
  p=$(echo "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+' || echo 0)
  f=$(echo "$line" | grep -oE '[0-9]+ (failed|error|errors)' | grep -oE '[0-9]+' | paste -sd+ | bc 2>/dev/null || echo 0)
  s=$(echo "$line" | grep -oE '[0-9]+ skipped' | grep -oE '[0-9]+' || echo 0)
  [ -z "$f" ] && f=0
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && [ "$rc" -ne 5 ]; then f=1; fi
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
}

if [ -d python/tests ]; then
  stage "python package tests (cpu backend)"
  out=$(FFPA_LIBRARY="$PWD/build-test/libffpa.so" PYTHONPATH="$PWD/python" \
        /usr/bin/python3 -m pytest -q -p no:cacheprovider python/tests 2>&1)
  count_pytest "$out" $?

  stage "pip install ./python into a fresh virtual environment (system torch, offline; libffpa built into the"
  echo "   wheel by meson-python, cpu only here), then the package's tests against the installed package"
  venv="$(mktemp -d)/venv"
  # The plugin choice travels in one native file: pip before 23.1 keeps only
  # the last of repeated --config-settings keys, so two setup-args left the
  # CUDA plugin on (built for every -Dcuda-archs target: 9 of CI's minutes).
  cpu_only="$(dirname "$venv")/cpu-only.ini"
  printf "[libffpa:project options]\ncuda = 'disabled'\nhip = 'disabled'\n" >"$cpu_only"
  if /usr/bin/python3 -m venv --system-site-packages "$venv" &&
     "$venv/bin/pip" install -q --no-build-isolation --no-index \
       --config-settings=setup-args=--native-file="$cpu_only" ./python; then
    tests="$PWD/python/tests"
    out=$(cd "$(dirname "$venv")" && env -u FFPA_LIBRARY -u PYTHONPATH FFPA_TEST_INSTALLED=1 \
          "$venv/bin/python" -m pytest -q -p no:cacheprovider "$tests" 2>&1)
    count_pytest "$out" $?
  else
    echo "pip install ./python failed"
    failed=$((failed + 1))
  fi
  rm -rf "$(dirname "$venv")"
fi

stage "done"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
