#!/usr/bin/env bash
# test-sanitize.sh — the whole CPU test suite again, built with
# -fsanitize=address,undefined (TOWER_SANITIZE=ON) into build-asan/: any
# invalid access, leak or undefined behaviour fails the test that hit it.
# The interop tests are left out (they exercise Python, not our memory).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# MPI off: Open MPI's own allocations (its MCA plugins, unloaded at MPI_Finalize) read as leaks to
# LeakSanitizer, beyond any suppression by module; the replicated_mpi mode's logic still runs here in one
# process (test_modes_equivalence), and test_mpi_train skips (77).
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Release -DTOWER_SANITIZE=ON -DTOWER_CUDA=OFF -DTOWER_BENCH=OFF -DTOWER_MPI=OFF \
  >build-asan-configure.log 2>&1 || { cat build-asan-configure.log; exit 1; }
cmake --build build-asan -j"$(nproc)"
cd build-asan
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --output-on-failure -j"$(nproc)" -LE interop
