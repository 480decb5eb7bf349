#!/usr/bin/env bash
# build.sh — configure and build Tower into build/ (Release; CUDA when found).
# Extra arguments go to cmake's configure step, e.g. -DTOWER_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >build-configure.log 2>&1 || { cat build-configure.log; exit 1; }
grep -E "^-- Tower:" build-configure.log || true
cmake --build build -j"$(nproc)"
