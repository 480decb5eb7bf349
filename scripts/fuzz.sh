#!/usr/bin/env bash
# fuzz.sh — build the libFuzzer targets of tests/fuzz/ and run each of them.
#
# usage: scripts/fuzz.sh [--seconds S] [--jobs J] [--targets a,b,...]
#   --seconds S   run each target for S seconds (default 30)
#   --jobs J      run J targets at the same time (default 1)
#   --targets L   a comma-separated subset of: tfrecord example checkpoint idx cifar10 image
# Installs nothing: it needs clang with libFuzzer (Debian's clang and
# libclang-rt-14-dev) and libomp-dev for clang's OpenMP.  Steps:
#   1. configure build-fuzz/ with clang and TOWER_FUZZ=ON (every library
#      with address and undefined-behaviour sanitizers and coverage) and
#      build the targets, fuzz_seed_tool and `tower`;
#   2. scripts/fuzz-corpus.sh build-fuzz/fuzz/seeds: seeds from valid files;
#   3. run each target with -max_total_time=S over its working corpus
#      build-fuzz/fuzz/corpus/<target> (kept between runs, so coverage
#      accumulates), the fresh seeds, and the committed seeds and regression
#      inputs of tests/fuzz/; -timeout=30 makes a unit slower than 30 s a
#      finding (and -report_slow_units=30 keeps libFuzzer from saving the
#      units between its default 10 s and that as findings too: a 383-byte
#      CMYK JPEG of 134 M pixels takes 9 s in the instrumented fuzz_image),
#      the default -rss_limit_mb=2048 a unit that needs more memory;
#   4. print one line per target: executions, exec/s, coverage (cov: edges,
#      ft: features), corpus (libFuzzer's units/bytes at the end of the run),
#      files in the working corpus, findings.
# A finding (crash, sanitizer report, broken invariant, leak, timeout, out of
# memory) is saved under build-fuzz/fuzz/findings/<target>/ and the script
# exits 1; the log of each run is build-fuzz/fuzz/logs/<target>.log.  To
# replay a finding: build-fuzz/tests/fuzz_<target> FILE.  Once fixed, copy the
# input into tests/fuzz/regress/<target>/ so the ctest fuzz_<target> keeps it.
set -euo pipefail
cd "$(dirname "$0")/.."
ALL_TARGETS="tfrecord example checkpoint idx cifar10 image"
SECONDS_PER_TARGET=30
JOBS=1
TARGETS=$ALL_TARGETS
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) SECONDS_PER_TARGET=$2; shift 2 ;;
    --seconds=*) SECONDS_PER_TARGET=${1#*=}; shift ;;
    --jobs) JOBS=$2; shift 2 ;;
    --jobs=*) JOBS=${1#*=}; shift ;;
    --targets) TARGETS=${2//,/ }; shift 2 ;;
    --targets=*) TARGETS=${1#*=}; TARGETS=${TARGETS//,/ }; shift ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "fuzz.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for t in $TARGETS; do
  case " $ALL_TARGETS " in *" $t "*) ;; *) echo "fuzz.sh: unknown target $t (known: $ALL_TARGETS)" >&2; exit 2 ;; esac
done
command -v clang >/dev/null || { echo "fuzz.sh: clang not found (Debian: clang libclang-rt-14-dev libomp-dev)" >&2; exit 1; }

B=build-fuzz
F=$B/fuzz
t0=$(date +%s)
if [ ! -f "$B/CMakeCache.txt" ]; then
  cmake -S . -B "$B" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTOWER_FUZZ=ON -DTOWER_CUDA=OFF \
    -DTOWER_BENCH=OFF >"$B.configure.log" 2>&1 || { cat "$B.configure.log"; exit 1; }
fi
exes=""
for t in $ALL_TARGETS; do exes="$exes fuzz_$t"; done
cmake --build "$B" -j"$(nproc)" --target $exes fuzz_seed_tool tower >"$B.build.log" 2>&1 || { tail -50 "$B.build.log"; exit 1; }
t_build=$(date +%s)

# The seed step runs `tower` built with the sanitizers; leaks are not its business.
rm -rf "$F/seeds"
ASAN_OPTIONS=detect_leaks=0 bash scripts/fuzz-corpus.sh "$F/seeds" "$B" >/dev/null
mkdir -p "$F/logs"
t_seeds=$(date +%s)

run_target() {
  local t=$1
  mkdir -p "$F/corpus/$t" "$F/findings/$t"
  local dirs=("$F/corpus/$t" "$F/seeds/$t")
  for d in tests/fuzz/corpus/$t tests/fuzz/regress/$t; do [ -d "$d" ] && dirs+=("$d"); done
  # The checkpoint seeds of real runs are 1.5 MB (mnist with momentum and moving averages), over libFuzzer's 1 MiB
  # default cap, which cut them: the fixed server then never met a load it accepts.
  local max_len=()
  [ "$t" = checkpoint ] && max_len=(-max_len=2097152)
  local rc=0
  "$B/tests/fuzz_$t" -max_total_time="$SECONDS_PER_TARGET" -timeout=30 -report_slow_units=30 -print_final_stats=1 \
    "${max_len[@]}" -artifact_prefix="$F/findings/$t/" "${dirs[@]}" >"$F/logs/$t.log" 2>&1 || rc=$?
  echo "$rc" >"$F/logs/$t.rc"
}

running=0
for t in $TARGETS; do
  rm -f "$F/findings/$t/"* 2>/dev/null || true
  run_target "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$JOBS" ]; then wait -n || true; running=$((running - 1)); fi
done
wait || true

status=0
echo "fuzz.sh: $(date -u +%Y-%m-%dT%H:%MZ), ${SECONDS_PER_TARGET} s per target, $(nproc) cores, build $((t_build - t0)) s, seeds $((t_seeds - t_build)) s"
printf '%-16s %11s %7s %5s %6s %12s %6s  %s\n' target executions exec/s cov ft corpus files findings
for t in $TARGETS; do
  log=$F/logs/$t.log
  # (a run that stopped at once has no status line: grep finds nothing)
  execs=$(grep -a 'stat::number_of_executed_units' "$log" | awk '{print $2}' | tail -1 || true)
  eps=$(grep -a 'stat::average_exec_per_sec' "$log" | awk '{print $2}' | tail -1 || true)
  last=$(grep -a -E '^#[0-9]+.*cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 || true)
  cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9]*[a-zA-Z]*\).*/\1/p' <<<"$last")
  n_files=$(find "$F/corpus/$t" -type f | wc -l)
  n_found=$(find "$F/findings/$t" -type f | wc -l)
  rc=$(cat "$F/logs/$t.rc" 2>/dev/null || echo 1)
  what="none"
  if [ "$rc" != 0 ] || [ "$n_found" != 0 ]; then
    status=1
    what="$(grep -a -m1 -E 'ERROR: |FUZZ_REQUIRE|runtime error' "$log" | cut -c1-120 || true) -> $(find "$F/findings/$t" -type f | head -1)"
  fi
  printf '%-16s %11s %7s %5s %6s %12s %6s  %s\n' "fuzz_$t" "${execs:-?}" "${eps:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" \
    "$n_files" "$what"
done
echo "fuzz.sh: total $(($(date +%s) - t0)) s; logs in $F/logs/"
exit $status
