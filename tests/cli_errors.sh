#!/usr/bin/env bash
# The command-line tools refuse bad input by name (tools/cli.h): every
# malformed or out-of-range value exits 2 with a message naming the flag;
# --help prints on stdout and exits 0; a CSV into a missing folder fails
# before any run; ffpa-bench's CSV parses. Usage: cli_errors.sh FFPA_RUN FFPA_BENCH FFPA_TUNE
set -u
run=$1 bench=$2 tune=$3
fails=0
expect() { # expect STATUS NEEDLE CMD...: status and a stderr line containing NEEDLE
  local want=$1 needle=$2
  shift 2
  local err
  err=$("$@" 2>&1 >/dev/null)
  local rc=$?
  if [ "$rc" != "$want" ] || [[ "$err" != *"$needle"* ]]; then
    echo "not ok: $* -> status $rc (want $want), stderr: ${err:0:200} (want '$needle')"
    fails=$((fails + 1))
  else
    echo "ok: $*"
  fi
}
expect 2 "--nq '1e6'" "$run" --backend cpu --nq 1e6
expect 2 "--nq '-5'" "$run" --backend cpu --nq -5
expect 2 "-d 'abc'" "$run" --backend cpu -d abc
expect 2 "--iters 'abc'" "$run" --backend cpu --iters abc
expect 2 "--dtype 'xyz'" "$run" --backend cpu --dtype xyz
expect 2 "--dropout '1.5'" "$run" --backend cpu --dropout 1.5
expect 2 "--window '3'" "$run" --backend cpu --window 3
expect 2 "--window (left) '-2'" "$run" --backend cpu --window -2,5
expect 2 "--softcap '0'" "$run" --backend cpu --softcap 0
expect 2 "unexpected argument" "$run" --backend cpu stray
expect 2 "unknown option" "$run" --bogus
expect 2 "multiplies past 2^63" "$run" --backend cpu --nq 4611686018427387904
expect 2 "--dtype 'xyz'" "$bench" --backend cpu --dtype xyz 1,2,2,8,8,16,16
expect 2 "--iters 'abc'" "$bench" --backend cpu --iters abc 1,2,2,8,8,16,16
expect 2 "--csv '/nonexistent-ffpa-dir/x.csv'" "$bench" --backend cpu --csv /nonexistent-ffpa-dir/x.csv 1,2,2,8,8,16,16
expect 2 "shape '1,2,2,8'" "$bench" --backend cpu 1,2,2,8
# tX (Q drawn from [-X, X)) needs a positive X.
expect 2 "shape '1,2,2,8,8,16,16,t'" "$bench" --backend cpu 1,2,2,8,8,16,16,t
expect 2 "shape '1,2,2,8,8,16,16,t0'" "$bench" --backend cpu 1,2,2,8,8,16,16,t0
expect 2 "shape '1,2,2,8,8,16,16,t-3'" "$bench" --backend cpu 1,2,2,8,8,16,16,t-3
expect 2 "--reps 'x'" "$tune" --reps x
expect 2 "--pass 'sideways'" "$tune" --pass sideways
expect 2 "--backend 'cpu'" "$tune" --backend cpu
# ffpa-bench's CSV: every row as wide as the header, the text columns
# quoted (the CUDA backward's names hold commas: "bwd dkdv ..., dq ..."),
# and a clean exit (under ASan this caught the decode-shape list leaking).
csv_out=$(mktemp)
row='^"[^"]*",[^,"]*,"[^"]*",[^,"]*,"[^"]*",[0-9.]+,[0-9.]+,"[^"]*",(fwd|bwd)$'
if "$bench" --backend cpu --backward --reps 1 --warmup 0 --csv "$csv_out" 1,2,2,8,8,16,16 >/dev/null 2>&1 &&
  [ "$(head -1 "$csv_out")" = "shape,backend,device,dtype,path,ms,tflops,check,pass" ] &&
  [ "$(tail -n +2 "$csv_out" | grep -cE "$row")" = 2 ]; then
  echo "ok: ffpa-bench --csv rows and quoting"
else
  echo "not ok: ffpa-bench --csv: $(cat "$csv_out")"
  fails=$((fails + 1))
fi
rm -f "$csv_out"
# A peaked-row shape (tX) runs and checks: the flag reaches the inputs, the
# scores stay finite.
if out=$("$bench" --backend cpu --check --no-time 1,2,2,9,13,24,24,t30l 2>&1) &&
  [[ "$out" == *"1,2,2,9,13,24,24,t30l"*" ok rel "*"nonfinite 0"* ]]; then
  echo "ok: ffpa-bench --check with tX"
else
  echo "not ok: ffpa-bench --check with tX: ${out:0:300}"
  fails=$((fails + 1))
fi
for tool in "$run" "$bench" "$tune"; do
  out=$("$tool" --help 2>/dev/null)
  rc=$?
  if [ $rc -ne 0 ] || [[ "$out" != usage:* ]]; then
    echo "not ok: $tool --help -> status $rc, stdout '${out:0:60}'"
    fails=$((fails + 1))
  else
    echo "ok: $tool --help"
  fi
done
echo "$fails failure(s)"
[ "$fails" -eq 0 ]
