#!/usr/bin/env bash
# test_bench_flags.sh PROGRAM... — the benchmark programs read their flags through base/flags.h's table: --help
# prints the usage and exits 0; a value outside a flag's range, or not a number, is refused before any work in
# one line naming the program and the flag, exit 2 (bench_pipeline --epochs 0 and bench_imagefolder --epochs 0
# once ran forever; atoi read '12x' as 12).  Each program gets a flag it has and a value it must refuse.
set -euo pipefail
fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
n=0
for prog in "$@"; do
  name=$(basename "$prog")
  case $name in
    bench_model) bad=(--reps 0) ;;
    bench_pipeline) bad=(--epochs 0) ;;
    bench_ps) bad=(--reps 12x) ;;
    bench_layers) bad=(--batch 0) ;;
    bench_conv) bad=(--threads 0) ;;
    bench_imagefolder) bad=("$work" --epochs 0) ;;
    gen_records) bad=(--out_dir "$work/g" --num_records 10 --num_shards 0) ;;
    *) fail "no bad value known for $name" ;;
  esac
  "$prog" --help >"$work/help" 2>&1 || fail "$name --help: exit $?"
  grep -q "^usage: $name " "$work/help" || fail "$name --help: no 'usage: $name' line: $(head -2 "$work/help")"
  set +e
  timeout 60 "$prog" "${bad[@]}" >"$work/out" 2>"$work/err"
  rc=$?
  set -e
  [ $rc = 2 ] || fail "$name ${bad[*]}: exit $rc, want 2 ($(cat "$work/err"))"
  [ "$(wc -l <"$work/err")" = 1 ] || fail "$name ${bad[*]}: not one line on stderr: $(cat "$work/err")"
  flag=${bad[-2]}
  grep -q "^$name: $flag " "$work/err" || fail "$name ${bad[*]}: the line does not name $name and $flag: $(cat "$work/err")"
  echo "ok: $name ${bad[*]} -> $(cat "$work/err")"
  n=$((n + 1))
done
[ $n -ge 1 ] || fail "no program given"
echo "PASS: $n programs"
