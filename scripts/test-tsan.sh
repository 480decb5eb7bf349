#!/usr/bin/env bash
# test-tsan.sh — the CPU test suite again, built with clang and
# -fsanitize=thread (TOWER_SANITIZE_THREAD=ON) into build-tsan/: a data race
# between the towers, the parameter server's threads, the input pipeline's
# workers, the trainer or OpenMP's teams fails the run.
#
# usage: scripts/test-tsan.sh [ctest arguments, e.g. -R test_tower]
# Installs what is missing (clang and libomp-dev are among
# scripts/install-deps.sh's packages).  Clang, not gcc: gcc's OpenMP runtime
# (libgomp) hides its barriers from the sanitizer, which then calls every
# second parallel region's reads races; clang's (libomp) is run with LLVM's
# Archer tool (OMP_TOOL_LIBRARIES), which tells the sanitizer about them.
# oneDNN is not instrumented and its own threads are not checked
# (ignore_noninstrumented_modules).  Every report goes to
# build-tsan/tsan-reports/ (log_path), so a race in a process whose exit
# status a test does not read (a run expected to fail) still fails this
# script, which prints the reports.  test_tsan_canary (label tsan) proves the
# build reports a planted race and not a clean run.  Left out: the interop
# tests (Python), valgrind (cannot run a sanitized binary), MPI (Open MPI's
# progress threads are not instrumented), CUDA and the benchmarks.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
archer=$(ls /usr/lib/llvm-*/lib/libarcher.so 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$archer" ]; then
  echo "test-tsan: LLVM's Archer tool (libarcher.so, Debian's libomp-dev) not found" >&2
  exit 1
fi
if [ -f build-tsan/CMakeCache.txt ] && ! grep -q "^CMAKE_C_COMPILER:.*clang" build-tsan/CMakeCache.txt; then
  rm -rf build-tsan # configured by another compiler before
fi
CC=clang cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Release -DTOWER_SANITIZE_THREAD=ON -DTOWER_CUDA=OFF \
  -DTOWER_BENCH=OFF -DTOWER_MPI=OFF >build-tsan-configure.log 2>&1 || { cat build-tsan-configure.log; exit 1; }
cmake --build build-tsan -j"$(nproc)"
reports="$PWD/build-tsan/tsan-reports"
rm -rf "$reports" && mkdir -p "$reports"
cd build-tsan
rc=0
OMP_TOOL_LIBRARIES="$archer" \
TSAN_OPTIONS="ignore_noninstrumented_modules=1 second_deadlock_stack=1 history_size=4 log_path=$reports/report" \
  ctest --output-on-failure -j"$(nproc)" -LE "interop|valgrind" "$@" || rc=$?
n=$(find "$reports" -type f | wc -l)
if [ "$n" -gt 0 ]; then
  echo "test-tsan: $n process(es) reported by ThreadSanitizer (build-tsan/tsan-reports/):"
  for f in "$reports"/*; do
    echo "== $f"
    head -60 "$f"
  done
  exit 1
fi
[ "$rc" -eq 0 ] && echo "test-tsan: no data race reported"
exit "$rc"
